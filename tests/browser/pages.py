"""The pages the browser tests act on. Everything is absolutely positioned so the tests know
where to click, and every page records what it saw in ``window.seen``."""

from __future__ import annotations

_HEAD = "<!doctype html><meta charset=utf-8><style>body{margin:0;font:16px sans-serif}</style>"

FORM = _HEAD + """<title>form</title>
<form method=post action=/submitted>
  <input id=name name=name autocomplete=off
         style="position:absolute;left:50px;top:50px;width:300px;height:30px">
</form>"""

WORDS = _HEAD + """<title>words</title>
<p id=p style="position:absolute;left:20px;top:20px;margin:0;font:40px monospace">alpha beta gamma</p>
<script>
function wordCenter(word) {
  const node = document.getElementById('p').firstChild, i = node.data.indexOf(word);
  const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + word.length);
  const b = r.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2];
}
</script>"""

DRAG = _HEAD + """<title>drag</title>
<input id=slider type=range min=0 max=100 value=0
       style="position:absolute;left:100px;top:100px;width:400px;margin:0">
<div id=box style="position:absolute;left:50px;top:300px;width:50px;height:50px;background:#36c"></div>
<script>
window.seen = [];
const box = document.getElementById('box'); let grab = null;
box.addEventListener('mousedown', e => { grab = [e.clientX - box.offsetLeft, e.clientY - box.offsetTop]; });
document.addEventListener('mousemove', e => {
  if (!grab) return; seen.push([e.clientX, e.clientY]);
  box.style.left = (e.clientX - grab[0]) + 'px'; box.style.top = (e.clientY - grab[1]) + 'px';
});
document.addEventListener('mouseup', () => { grab = null; });
</script>"""

LONG = _HEAD + """<title>long</title>
<div style="width:5000px;height:5000px;background:linear-gradient(#fff,#000)"></div>"""

MENU = _HEAD + """<title>menu</title>
<div id=target style="position:absolute;left:100px;top:100px;width:200px;height:100px;background:#eee"></div>
<div id=menu style="display:none;position:absolute;background:#c33;width:120px;height:60px"></div>
<script>
window.seen = [];
const target = document.getElementById('target'), menu = document.getElementById('menu');
target.addEventListener('contextmenu', e => {
  e.preventDefault(); menu.style.display = 'block';
  menu.style.left = e.clientX + 'px'; menu.style.top = e.clientY + 'px';
});
for (const kind of ['mousedown', 'click', 'dblclick'])
  target.addEventListener(kind, e => seen.push({kind, button: e.button, shift: e.shiftKey,
                                                ctrl: e.ctrlKey, alt: e.altKey, x: e.clientX, y: e.clientY}));
</script>"""

# 8 x 5 buttons, 40x40 px, every 80 px: small targets, so a scaling error lands on the wrong one.
GRID = _HEAD + "<title>grid</title>" + "".join(
    f"<button id=b{r}{c} onclick=\"window.hit=this.id\" style=\"position:absolute;"
    f"left:{40 + c * 80}px;top:{40 + r * 80}px;width:40px;height:40px;padding:0\"></button>"
    for r in range(5) for c in range(8)
)

SECRET = _HEAD + """<title>secret</title>
<input id=pw type=password value=hunter2
       style="position:absolute;left:100px;top:100px;width:200px;height:40px;background:#fff;border:0">
<input id=plain type=text value=visible
       style="position:absolute;left:100px;top:200px;width:200px;height:40px;background:#fff;border:0">
<div class=private style="position:absolute;left:100px;top:300px;width:200px;height:40px;color:#c00">
  card 4111 1111</div>"""

LINKS = _HEAD + """<title>links</title>
<a id=bad href="http://blocked.test:{port}/forbidden"
   style="position:absolute;left:50px;top:50px;width:200px;height:40px;display:block">blocked</a>
<a id=file href="file:///etc/passwd"
   style="position:absolute;left:50px;top:150px;width:200px;height:40px;display:block">passwd</a>
<a id=good href="/hello"
   style="position:absolute;left:50px;top:250px;width:200px;height:40px;display:block">hello</a>"""

HELLO = _HEAD + "<title>hello</title><h1 id=hello>hello</h1>"

# Opens the socket ?url= names (after setting the cookie sid=?sid), sends a text and a binary
# message once open, and lists what comes back; #state says open / closed CODE REASON.
SOCKET = _HEAD + """<title>ws</title><ul id=echoes></ul><p id=state>connecting</p>
<script>
const q = new URLSearchParams(location.search);
document.cookie = 'sid=' + q.get('sid');
const ws = new WebSocket(q.get('url'));
ws.binaryType = 'arraybuffer';
const show = text => { const li = document.createElement('li'); li.textContent = text; echoes.append(li); };
ws.onopen = () => { state.textContent = 'open'; ws.send('hello'); ws.send(new Uint8Array([1, 2, 255])); };
ws.onmessage = e => show(typeof e.data === 'string' ? 'text:' + e.data
                                                    : 'binary:' + new Uint8Array(e.data).join(','));
ws.onclose = e => { state.textContent = ('closed ' + e.code + ' ' + e.reason).trim(); };
window.ws = ws;
</script>"""

# The navigation tests' pages (tests.browser.test_navigation), added per test under a fresh
# prefix ({base}): a search form (submitted by ENTER or its button), a link to the results, a
# button that navigates from a timer, and a link to the search page itself.
SEARCH = _HEAD + """<title>search</title>
<form action="{base}/results">
  <input id=q name=q autocomplete=off style="position:absolute;left:50px;top:50px;width:300px;height:30px">
  <button id=go style="position:absolute;left:400px;top:50px;width:100px;height:30px">search</button>
</form>
<a id=link href="{base}/results?q=link"
   style="position:absolute;left:50px;top:150px;width:200px;height:40px;display:block">results</a>
<button id=later onclick="setTimeout(() => location.assign('{base}/results?q=later'), 300)"
        style="position:absolute;left:50px;top:250px;width:200px;height:40px">later</button>
<a id=search href="{base}/search"
   style="position:absolute;left:50px;top:350px;width:200px;height:40px;display:block">search</a>"""

# Renders at once (white), then turns green when its image arrives: the image is not
# render-blocking (a pending stylesheet would hold every frame, and so the screenshot, back), but
# the load event waits for it.
RESULTS = _HEAD + """<title>results</title><p id=results>results</p>
<img src="{base}/green.svg" alt="" style="position:fixed;left:0;top:100px;width:100%;height:700px">"""
RESULTS_IMAGE = ("<svg xmlns='http://www.w3.org/2000/svg' width='8' height='8'>"
                 "<rect width='8' height='8' fill='rgb(0,160,0)'/></svg>")
RESULTS_GREEN = (0, 160, 0)

# A single-page app: its router intercepts the link's navigation (the Navigation API), a
# dialog's form closes the dialog (method=dialog), and a form posts into an iframe. None of
# them leaves the document.
APP = _HEAD + """<title>app</title>
<a id=route href="{base}/app/inbox"
   style="position:absolute;left:50px;top:50px;width:200px;height:40px;display:block">inbox</a>
<dialog id=dialog open style="position:absolute;left:50px;top:150px;margin:0">
  <form method=dialog><button id=close style="width:200px;height:40px">close</button></form></dialog>
<form action="/hello" target=side>
  <button style="position:absolute;left:50px;top:250px;width:200px;height:40px">into the frame</button></form>
<iframe name=side style="position:absolute;left:300px;top:250px;width:300px;height:100px"></iframe>
<script>
navigation.addEventListener('navigate', e => {
  if (e.canIntercept && e.destination.url.includes('/app/'))
    e.intercept({ handler: async () => { document.body.dataset.route = new URL(e.destination.url).pathname; } });
});
</script>"""

# Buttons that turn the page green: at once, from a 0 ms timer, from a 200 ms timer.
PAINT = _HEAD + """<title>paint</title>
<script>function green() { document.body.style.background = 'rgb(0,160,0)'; }</script>
<button onclick="green()" style="position:absolute;left:50px;top:50px;width:200px;height:40px">now</button>
<button onclick="setTimeout(green, 0)"
        style="position:absolute;left:50px;top:150px;width:200px;height:40px">next task</button>
<button onclick="setTimeout(green, 200)"
        style="position:absolute;left:50px;top:250px;width:200px;height:40px">soon</button>"""

PAGES: dict[str, str] = {
    "/form": FORM,
    "/words": WORDS,
    "/drag": DRAG,
    "/long": LONG,
    "/menu": MENU,
    "/grid": GRID,
    "/secret": SECRET,
    "/hello": HELLO,
    "/links": LINKS,
    "/api": '{"ok": true}',
    "/ws": SOCKET,
    "/paint": PAINT,
}
