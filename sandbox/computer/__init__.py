"""What every computer placement shares (Chromium today: :mod:`sandbox.browser`).

    keys      the key names models send -> canonical names
"""
