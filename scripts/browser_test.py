"""The page at `/` in a real browser: headless Chromium (Debian's
`chromium` and `chromium-driver`) with a WAV as its fake microphone,
driven over WebDriver (the standard library's HTTP client, nothing else
installed). The page must show partial text as the audio plays and then
final lines that read the file's transcript (the `pulsed transcribe` line
of the same model); a screenshot of the page is kept.

    python3 scripts/browser_test.py BIN WAV SCREENSHOT.png [--model M]
"""
import argparse
import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import wave


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, what, log=None, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            why = open(log).read().strip().splitlines()[-1:] if log else []
            sys.exit(f"browser_test: {what} exited ({proc.returncode}) {' '.join(why)}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    sys.exit(f"browser_test: {what} did not answer at {url}")


class WebDriver:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.session = None

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())["value"]
        except urllib.error.HTTPError as e:
            sys.exit(f"browser_test: WebDriver {method} {path}: {e.read()[:400]!r}")

    def start(self, chromium, args):
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def run(self, script, *args):
        return self.call("POST", f"/session/{self.session}/execute/sync",
                         {"script": script, "args": list(args)})

    def quit(self):
        if self.session:
            self.call("DELETE", f"/session/{self.session}")


def padded(src, dst, before=0.5, after=1.5):
    """`src` with silence around it: the fake microphone's audio stops
    dead at the file's end, a click the synthetic-voice model reads as a
    letter."""
    with wave.open(src) as r:
        params, frames = r.getparams(), r.readframes(r.getnframes())
    step = params.sampwidth * params.nchannels
    with wave.open(dst, "wb") as w:
        w.setparams(params)
        w.writeframes(bytes(int(before * params.framerate) * step) + frames
                      + bytes(int(after * params.framerate) * step))


def words(text):
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("wav")
    p.add_argument("screenshot")
    p.add_argument("--model", default="pulsed-en-ctc")
    p.add_argument("--timeout", type=float, default=90)
    a = p.parse_args()
    wav = os.path.abspath(a.screenshot) + ".wav"
    os.makedirs(os.path.dirname(wav), exist_ok=True)
    padded(a.wav, wav)

    want = json.loads(subprocess.run(
        [a.bin, "transcribe", "--model", a.model, "--format", "jsonl", wav],
        check=True, capture_output=True, text=True).stdout.splitlines()[0])["text"]

    port, driver_port, key = free_port(), free_port(), "page-test-key"
    log = os.path.abspath(a.screenshot) + ".server.log"
    with open(log, "w") as out:
        server = subprocess.Popen([a.bin, "serve", "--model", a.model, "--port", str(port),
                                   "--api-key", key, "--max-streams", "2"],
                                  stdout=out, stderr=out)
    driver = subprocess.Popen(["chromedriver", f"--port={driver_port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wd = WebDriver(driver_port)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", server, "pulsed serve", log)
        wait_http(f"http://127.0.0.1:{driver_port}/status", driver, "chromedriver")
        wd.start("/usr/bin/chromium", [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,700",
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}%noloop",
            "--autoplay-policy=no-user-gesture-required",
        ])
        wd.call("POST", f"/session/{wd.session}/url", {"url": f"http://127.0.0.1:{port}/"})
        wd.run("document.getElementById('key').value = arguments[0];"
               "document.getElementById('start').click();", key)
        end, finals = time.time() + a.timeout, []
        while time.time() < end:
            finals = wd.run("return [...document.querySelectorAll('#finals .text')]"
                            ".map(e => e.textContent)")
            if words(" ".join(finals)) == words(want):
                break
            time.sleep(0.5)
        # Stop: what was said becomes final (a commit), then the page closes
        wd.run("document.getElementById('stop').click()")
        end = time.time() + 10
        while time.time() < end:
            status = wd.run("return document.getElementById('status').textContent")
            if status != "finishing":
                break
            time.sleep(0.2)
        summary = wd.run("return document.getElementById('summary').textContent")
        deltas = int(wd.run("return document.body.dataset.deltas || '0'"))
        png = base64.b64decode(wd.call("GET", f"/session/{wd.session}/screenshot"))
        with open(a.screenshot, "wb") as f:
            f.write(png)
    finally:
        wd.quit()
        driver.terminate()
        server.terminate()
    got = " ".join(finals)
    print(f"browser_test: page status {status!r}; {deltas} partial updates; final lines {finals!r}; {summary}")
    print(f"browser_test: screenshot {a.screenshot} ({len(png)} bytes)")
    if words(got) != words(want):
        sys.exit(f"browser_test: the page read {got!r}, the file's transcript is {want!r}")
    if status != "stopped":
        sys.exit(f"browser_test: after Stop the page says {status!r}, not 'stopped'")
    if deltas == 0:
        sys.exit("browser_test: the page showed no partial text before its final line")
    print("browser_test: the page's final text equals the file's transcript")


if __name__ == "__main__":
    main()
