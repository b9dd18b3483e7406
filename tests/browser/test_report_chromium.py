#!/usr/bin/env python3
"""The HTML cost report in a real browser: headless Chromium driven through chromedriver's
WebDriver protocol (plain HTTP + JSON, Python's standard library only).

Writes a report with `grux cost sweep ... --format html --bench FIXTURE`, opens it, and checks
that it renders (three plots, no script errors, no network request), that moving a slider
changes the numbers and the plots, that each plot exports as PNG and SVG, and that a
screenshot can be taken (saved next to the report); then a sweep over the number of ranks
(`--vary ranks=...`) renders too. Exit code 0 on success; on failure it
prints what was expected and what the page showed.

Usage: test_report_chromium.py --grux BUILD/grux --out DIR [--keep]
Needs Debian's chromium and chromium-driver (scripts/install-deps.sh) and the plotting
library (scripts/install-web-assets.sh).
"""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print(f"test_report_chromium: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print(f"  ok: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few WebDriver commands the test needs."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.sid = None

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            fail(f"WebDriver {method} {path}: HTTP {e.code}: {e.read()[:2000]!r}")

    def wait_up(self, proc, seconds=30):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if proc.poll() is not None:
                fail(f"chromedriver exited with code {proc.returncode}")
            try:
                with urllib.request.urlopen(self.base + "/status", timeout=2) as r:
                    if json.loads(r.read())["value"].get("ready"):
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        fail(f"chromedriver did not answer on {self.base} within {seconds} s")

    def start(self, chromium, window):
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium,
                        # No sandbox: CI runs as root. The resolver rule makes any attempt to
                        # reach the network fail, so the report must be self-contained.
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", f"--window-size={window}",
                                 "--host-resolver-rules=MAP * ~NOTFOUND",
                                 "--no-first-run", "--no-default-browser-check"],
                    },
                    "goog:loggingPrefs": {"performance": "ALL", "browser": "ALL"},
                }
            }
        }
        value = self.call("POST", "/session", caps, timeout=120)
        self.sid = value["sessionId"]

    def s(self, path):
        return f"/session/{self.sid}{path}"

    def get(self, url):
        self.call("POST", self.s("/url"), {"url": url}, timeout=120)

    def js(self, script, *args):
        return self.call("POST", self.s("/execute/sync"), {"script": script, "args": list(args)})

    def js_async(self, script, *args):
        return self.call("POST", self.s("/execute/async"), {"script": script, "args": list(args)})

    def find(self, css):
        v = self.call("POST", self.s("/element"), {"using": "css selector", "value": css})
        return next(iter(v.values()))

    def send_keys(self, element, text):
        self.call("POST", self.s(f"/element/{element}/value"), {"text": text})

    def screenshot(self):
        return base64.b64decode(self.call("GET", self.s("/screenshot")))

    def log(self, kind):
        return self.call("POST", self.s("/se/log"), {"type": kind}) or []

    def quit(self):
        if self.sid:
            self.call("DELETE", self.s(""))
            self.sid = None


def wait_rendered(wd, what):
    """Waits until the open report says it has rendered (60 s at most)."""
    deadline = time.time() + 60
    while wd.js("return document.body && document.body.dataset.ready") != "1":
        if time.time() > deadline:
            fail(f"{what} did not finish rendering within 60 s; script errors: "
                 f"{wd.js('return window.gruxErrors')}")
        time.sleep(0.25)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grux", required=True, help="the grux binary")
    ap.add_argument("--out", required=True, help="folder for the report and the screenshot")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--chromedriver",
                    default=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    args = ap.parse_args()
    for tool, path in (("chromium", args.chromium), ("chromedriver", args.chromedriver)):
        if not os.path.exists(path):
            fail(f"{tool} not found at {path}: install Debian's chromium and chromium-driver "
                 f"with 'bash scripts/install-deps.sh'")
    os.makedirs(args.out, exist_ok=True)
    report = os.path.join(args.out, "report.html")
    shot = os.path.join(args.out, "report.png")
    bench = os.path.join(HERE, "bench_sample.jsonl")

    print("== writing the report")
    cmd = [args.grux, "cost", "sweep", "gru", "--vary", "n=1..64:x2", "--vary", "h=64..512:x2",
           "--fixed", "l1d1t100n1i128h256", "--train", "--mode", "gemm", "--threads", "2",
           "--format", "html", "--bench", bench, "--out", report]
    # No calibrated profile: the report's numbers must not depend on this machine's ~/.config.
    env = dict(os.environ, GRUX_PROFILE=os.path.join(args.out, "no-such-profile.json"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {r.returncode}: {r.stderr.strip()}")
    html = open(report, encoding="utf-8").read()
    # The page's own markup (outside the inlined library) names no external resource.
    markup = html.split("<script>")[0] + html.split("</script>")[-1]
    check(not any(tag in markup for tag in ("<script src", "<link", "<img", "@import", "url(")),
          "the report's markup loads nothing by URL")

    print("== opening it in headless Chromium")
    port = free_port()
    driver_log = open(os.path.join(args.out, "chromedriver.log"), "w")
    proc = subprocess.Popen([args.chromedriver, f"--port={port}"], stdout=driver_log,
                            stderr=subprocess.STDOUT)
    wd = WebDriver(port)
    try:
        wd.wait_up(proc)
        wd.start(args.chromium, "1400,1300")
        wd.get("file://" + os.path.abspath(report))
        wait_rendered(wd, "the report")
        check(wd.js("return window.gruxErrors") == [], "no script errors")
        plots = wd.js("""return ['plot-line', 'plot-grid', 'plot-roofline'].map((id) => {
            const d = document.getElementById(id);
            return {id: id, plotted: !!(d && d.classList.contains('js-plotly-plot')),
                    svgs: d ? d.querySelectorAll('svg.main-svg').length : 0,
                    traces: d && d.data ? d.data.map((t) => t.type || 'scatter') : []};
        });""")
        for p in plots:
            check(p["plotted"] and p["svgs"] > 0, f"{p['id']} rendered ({p['traces']})")
        check("heatmap" in plots[1]["traces"], "the two-parameter plot is a heatmap")
        count_measured = """const d = document.getElementById('plot-roofline').data;
            const t = d.find((t) => t.name === 'measured (grux bench)');
            return t ? t.x.length : 0;"""
        measured = wd.js(count_measured)
        check(measured == 2, f"the roofline shows the fixture's 2 inference runs (got {measured})")
        wd.js("""const s = document.getElementById('roof-phase');
            s.value = 'training'; s.dispatchEvent(new Event('change'));""")
        measured = wd.js(count_measured)
        check(measured == 1, f"and its training run with the training phase (got {measured})")

        print("== moving a slider")
        before = wd.js("""return {n: document.getElementById('value-n').textContent,
            d: document.getElementById('descriptor').textContent,
            numbers: document.getElementById('numbers').innerText,
            marker: document.getElementById('plot-line').data[1].x[0]};""")
        check(before["n"] == "1" and before["d"] == "l1d1t100n1i128h64",
              f"the page starts at the first point ({before['d']})")
        slider = wd.find("#slider-n")
        wd.send_keys(slider, "\ue014")  # ArrowRight: one step up, as a user would
        time.sleep(0.5)
        after = wd.js("""return {n: document.getElementById('value-n').textContent,
            d: document.getElementById('descriptor').textContent,
            numbers: document.getElementById('numbers').innerText,
            marker: document.getElementById('plot-line').data[1].x[0]};""")
        check(after["n"] == "2" and after["d"] == "l1d1t100n2i128h64",
              f"the slider moved n from 1 to 2 ({after['d']})")
        check(after["numbers"] != before["numbers"], "the numbers changed with the slider")
        check(after["marker"] != before["marker"], "the current-point marker moved")

        # The numbers shown are the sweep's own: GEMM FLOP of the forward at n = 2.
        flop = 2 * 2 * 100 * 3 * 64 * (128 + 64)
        check(f"{flop:,}" in after["numbers"], f"forward total shows {flop:,} FLOP")

        print("== exporting each plot")
        for pid in ("plot-line", "plot-grid", "plot-roofline"):
            for fmt, prefix in (("png", "data:image/png;base64,"), ("svg", "data:image/svg+xml")):
                url = wd.js_async("""const done = arguments[arguments.length - 1];
                    Plotly.toImage(arguments[0], {format: arguments[1], width: 600, height: 400})
                        .then((u) => done(u.slice(0, 40)), (e) => done('error: ' + e));""", pid, fmt)
                check(url.startswith(prefix), f"{pid} exports as {fmt.upper()}")

        print("== screenshot")
        png = wd.screenshot()
        with open(shot, "wb") as f:
            f.write(png)
        check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000,
              f"screenshot {shot} ({len(png)} bytes)")

        print("== offline")
        urls = []
        for entry in wd.log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") == "Network.requestWillBeSent":
                urls.append(msg["params"]["request"]["url"])
        remote = [u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:"))]
        check(urls and not remote, f"{len(urls)} requests, none to the network {remote[:3]}")
        severe = [e["message"] for e in wd.log("browser") if e.get("level") == "SEVERE"]
        check(not severe, f"no severe console messages {severe[:3]}")

        print("== a sweep over the number of ranks (grux cost sweep --vary ranks=...)")
        ranks_report = os.path.join(args.out, "ranks.html")
        cmd = [args.grux, "cost", "sweep", "charlm", "--fixed", "l1t64n1024e64h512v65",
               "--vary", "ranks=1..64:x2", "--vary", "n=256..1024:x2", "--train", "--threads",
               "2", "--format", "html", "--out", ranks_report]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited with {r.returncode}: {r.stderr.strip()}")
        wd.get("file://" + os.path.abspath(ranks_report))
        wait_rendered(wd, "the ranks report")
        check(wd.js("return window.gruxErrors") == [], "no script errors in the ranks report")
        check(wd.js("return !!document.getElementById('slider-ranks')"), "a slider for ranks")
        names = wd.js("return D.metrics.map((m) => m.key)")
        check("speedup_10gbit_x" in names and "step_100gbit_ms" in names,
              "the ranks report carries the step time and speedup per network")
    finally:
        try:
            wd.quit()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            driver_log.close()
    print("test_report_chromium: passed")


if __name__ == "__main__":
    main()
