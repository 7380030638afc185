// The report's only script: the filters and the full-size screenshot viewer. It reads the page;
// it loads nothing.
(() => {
  "use strict";
  const calls = Array.from(document.querySelectorAll("article.call"));
  const turns = Array.from(document.querySelectorAll("section.turn"));
  const bar = document.getElementById("filters");
  const typeSelect = document.getElementById("type");
  const shown = document.getElementById("shown");
  let flag = "all";

  function apply() {
    const type = typeSelect.value;
    let count = 0;
    for (const call of calls) {
      const visible = (flag === "all" || call.dataset.flags.split(" ").includes(flag)) &&
        (type === "" || call.dataset.type === type);
      call.hidden = !visible;
      if (visible) count += 1;
    }
    const filtering = flag !== "all" || type !== "";
    document.body.classList.toggle("filtering", filtering);
    for (const turn of turns) {
      turn.hidden = filtering && !turn.querySelector("article.call:not([hidden])");
    }
    shown.textContent = `${count} of ${calls.length} calls`;
  }

  bar.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-flag]");
    if (!button) return;
    flag = button.dataset.flag;
    for (const other of bar.querySelectorAll("button[data-flag]")) {
      other.setAttribute("aria-pressed", String(other === button));
    }
    apply();
  });
  typeSelect.addEventListener("change", apply);

  const dialog = document.getElementById("full");
  const frame = dialog.querySelector(".frame");

  // Full size: the same picture (its class holds the image) with the same marks, as large as
  // the image is or the window allows.
  function open(figure) {
    const marks = figure.querySelector("svg.marks");
    if (!marks) return;
    const clone = marks.cloneNode(true);
    const width = Number(figure.dataset.width), height = Number(figure.dataset.height);
    const fit = Math.min(width, window.innerWidth * 0.96 - 16, (window.innerHeight * 0.96 - 60) * width / height);
    clone.style.width = `${Math.max(fit, 100)}px`;
    frame.replaceChildren(clone);
    dialog.querySelector(".caption").textContent = figure.dataset.caption || "";
    dialog.showModal();
  }

  document.addEventListener("click", (event) => {
    const figure = event.target.closest("figure.shot[data-sha]");
    if (figure && !dialog.contains(figure)) open(figure);
  });
  document.addEventListener("keydown", (event) => {
    const figure = event.target.closest && event.target.closest("figure.shot[data-sha]");
    if (figure && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      open(figure);
    }
  });
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog || event.target.closest(".close")) dialog.close();
  });
  dialog.addEventListener("close", () => frame.replaceChildren());
})();
