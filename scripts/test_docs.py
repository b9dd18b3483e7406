#!/usr/bin/env python3
"""The documentation's doc test: runs every code block of README.md and docs/*.md.

Usage (from anywhere; scripts/test.sh runs it after the Release build and its tests):
    python3 scripts/test_docs.py BUILD_DIR [--only TEXT] [--verbose]
        run the blocks (--only: those whose file:line contains TEXT; --verbose: print outputs)
    python3 scripts/test_docs.py --list                    print the blocks found, run nothing

A fenced block runs according to its info string (the word after the opening fence):
  sh, bash, shell  bash -euo pipefail, in a working directory that looks like the checkout
                   after the set-up command: every top-level entry of the repository linked
                   in, `build` linked to BUILD_DIR, and a fresh `out/` of its own (so nothing
                   is written into the repository). PATH starts with BUILD_DIR (the `grux`
                   command), then /usr/bin (Debian's python3, as on a fresh Debian 12).
  cpp, c++, c      a complete program (with main): compiled against BUILD_DIR installed into a
                   temporary prefix, through `pkg-config --static --cflags --libs grux`, then
                   run in that working directory.
  python, py       Debian's python3, with PYTHONPATH=BUILD_DIR/python (the package built there).
  anything else    not run: text (outputs, synopses), console, cmake snippets.
The blocks of one page run in order and share one working directory, so a block may use what
an earlier block of the same page wrote under out/. A block right after a line
`<!-- doc-test: skip: REASON -->` is not run; the summary lists it with its reason.
Exits 1 if a block fails or no block ran. Standard library only.
"""

import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SH_KINDS = {"sh", "bash", "shell"}
CPP_KINDS = {"cpp", "c++", "cxx"}
C_KINDS = {"c"}
PY_KINDS = {"python", "py", "python3"}
RUN_KINDS = SH_KINDS | CPP_KINDS | C_KINDS | PY_KINDS
SKIP_RE = re.compile(r"^\s*<!--\s*doc-test:\s*skip:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
BLOCK_TIMEOUT_S = 600


class Block:
    def __init__(self, path, line, kind, text, skip):
        self.path, self.line, self.kind, self.text, self.skip = path, line, kind, text, skip

    @property
    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"

    @property
    def runs(self):
        return self.kind in RUN_KINDS and self.skip is None


def pages():
    files = [os.path.join(ROOT, "README.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [f for f in files if os.path.isfile(f)]


def extract(path):
    """The fenced blocks of one Markdown file (fences may be indented, as in list items)."""
    blocks = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    last_text = ""  # the last non-blank line outside a block
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            if lines[i].strip():
                last_text = lines[i]
            i += 1
            continue
        indent, fence, kind = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i + 1  # 1-based line of the opening fence
        body = []
        i += 1
        while i < len(lines):
            s = lines[i]
            if s.strip().startswith(fence[0] * len(fence)) and s.strip().strip(fence[0]) == "":
                break
            body.append(s[indent:] if s[:indent].strip() == "" else s.lstrip())
            i += 1
        else:
            sys.exit(f"test_docs: {os.path.relpath(path, ROOT)}:{start}: unclosed code block")
        i += 1
        skip = SKIP_RE.match(last_text)
        blocks.append(Block(path, start, kind, "\n".join(body) + "\n",
                            skip.group(1) if skip else None))
        last_text = ""
    return blocks


def make_workdir(tmp, build):
    """A directory that looks like the checkout after the set-up command, writing nowhere else."""
    work = tempfile.mkdtemp(prefix="page-", dir=tmp)
    for name in os.listdir(ROOT):
        if name in (".git", "out", "dist") or name.startswith("build") or name.startswith(".venv"):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    os.symlink(build, os.path.join(work, "build"))
    os.mkdir(os.path.join(work, "out"))
    return work


def environment(build, tmp):
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([build, "/usr/bin", "/bin", env.get("PATH", "")])
    env["GRUX_ROOT"] = ROOT
    env["PYTHONPATH"] = os.path.join(build, "python")
    # grux calibrate's default profile and anything else under ~/.config stay in the test's tmp.
    env["XDG_CONFIG_HOME"] = os.path.join(tmp, "config")
    env.pop("GRUX_PROFILE", None)
    env.pop("GRUX_SIMD_TARGET", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Open MPI as root (CI) and on a machine with fewer cores than ranks, as tests/ does.
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return env


def install_prefix(build, tmp):
    """BUILD_DIR installed into a temporary prefix; returns its pkg-config folder."""
    prefix = os.path.join(tmp, "prefix")
    r = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"test_docs: cmake --install {build} failed:\n{r.stdout}")
    pcs = glob.glob(os.path.join(prefix, "**", "pkgconfig", "grux.pc"), recursive=True)
    if not pcs:
        sys.exit(f"test_docs: the install in {prefix} has no grux.pc")
    return os.path.dirname(pcs[0])


def compile_block(block, n, tmp, pkgconfig_dir, env):
    """Compiles a C or C++ block; returns (executable or None, output, seconds)."""
    t0 = time.monotonic()
    cxx = block.kind in CPP_KINDS
    src = os.path.join(tmp, f"block{n}.{'cpp' if cxx else 'c'}")
    exe = os.path.join(tmp, f"block{n}")
    with open(src, "w", encoding="utf-8") as f:
        f.write(block.text)
    penv = dict(env, PKG_CONFIG_PATH=pkgconfig_dir)
    flags = subprocess.run(["pkg-config", "--static", "--cflags", "--libs", "grux"], env=penv,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if flags.returncode != 0:
        return None, flags.stdout, time.monotonic() - t0
    cmd = (["g++", "-std=c++20"] if cxx else ["gcc", "-std=c99"]) + ["-O1", "-Wall", src, "-o",
                                                                    exe] + flags.stdout.split()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = "$ " + " ".join(cmd) + "\n" + r.stdout
    return (exe if r.returncode == 0 else None), out, time.monotonic() - t0


def run(cmd, cwd, env):
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT_S)
        return r.returncode, r.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(timed out after {BLOCK_TIMEOUT_S} s)"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build", nargs="?", help="the build tree (its grux, libraries, python/)")
    p.add_argument("--list", action="store_true", help="print the blocks found, run nothing")
    p.add_argument("--only", help="run only the blocks whose file:line contains this text")
    p.add_argument("--verbose", action="store_true", help="print every block's output")
    args = p.parse_args()

    blocks = [b for f in pages() for b in extract(f)]
    if not blocks:
        sys.exit("test_docs: no code block found in README.md and docs/*.md")
    if args.list:
        for b in blocks:
            state = "run" if b.runs else (f"skip: {b.skip}" if b.skip is not None else "text")
            print(f"{b.where:28} {b.kind or '(none)':8} {state}")
        runs = sum(b.runs for b in blocks)
        print(f"{len(blocks)} blocks: {runs} to run, {sum(b.skip is not None for b in blocks)} "
              f"skipped, {len(blocks) - runs - sum(b.skip is not None for b in blocks)} not run")
        return 0
    if not args.build:
        p.error("give BUILD_DIR (or --list)")
    build = os.path.abspath(args.build)
    if not os.access(os.path.join(build, "grux"), os.X_OK):
        sys.exit(f"test_docs: {build}/grux is missing: build the tree first")

    selected = [b for b in blocks if b.runs and (not args.only or args.only in b.where)]
    skipped = [b for b in blocks if b.skip is not None and (not args.only or args.only in b.where)]
    if not selected:
        sys.exit("test_docs: no block to run")
    tmp = tempfile.mkdtemp(prefix="grux-doc-test-")
    env = environment(build, tmp)
    os.makedirs(env["XDG_CONFIG_HOME"])
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    t_start = time.monotonic()
    failures, ran = [], 0
    try:
        # C and C++ blocks compile up front, on every core, against one install of the build.
        native = [b for b in selected if b.kind in CPP_KINDS | C_KINDS]
        compiled = {}
        if native:
            pc = install_prefix(build, tmp)
            # A shared build's programs find its libraries there (a static one has none).
            libdir = os.path.dirname(pc)
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                futures = {id(b): pool.submit(compile_block, b, n, tmp, pc, env)
                           for n, b in enumerate(native)}
                compiled = {k: f.result() for k, f in futures.items()}
        workdirs = {}
        for n, b in enumerate(selected):
            work = workdirs.get(b.path) or workdirs.setdefault(b.path, make_workdir(tmp, build))
            t0 = time.monotonic()
            if b.kind in SH_KINDS:
                script = os.path.join(tmp, f"block{n}.sh")
                with open(script, "w", encoding="utf-8") as f:
                    f.write(b.text)
                rc, out = run(["bash", "-euo", "pipefail", script], work, env)
            elif b.kind in PY_KINDS:
                script = os.path.join(tmp, f"block{n}.py")
                with open(script, "w", encoding="utf-8") as f:
                    f.write(b.text)
                rc, out = run([python, script], work, env)
            else:
                exe, out, secs = compiled[id(b)]
                t0 -= secs
                if exe is None:
                    rc = 1
                    out = "(does not compile)\n" + out
                else:
                    rc, run_out = run([exe], work, env)
                    out += run_out
            ran += 1
            secs = time.monotonic() - t0
            status = "ok" if rc == 0 else f"FAILED (exit {rc})"
            print(f"{status:18} {b.where:28} {b.kind:7} {secs:6.1f} s", flush=True)
            if args.verbose and rc == 0:
                print(out.rstrip(), flush=True)
            if rc != 0:
                failures.append(b)
                print(f"---- the block ({b.where}):\n{b.text}---- its output:\n{out.rstrip()}\n----",
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for b in skipped:
        print(f"skipped            {b.where:28} {b.kind:7} {b.skip}")
    total = time.monotonic() - t_start
    print(f"test_docs: ran {ran} blocks in {total:.0f} s, {len(failures)} failed, "
          f"{len(skipped)} skipped; {len(blocks) - ran - len(skipped)} not run (text)")
    for b in failures:
        print(f"test_docs: FAILED {b.where} ({b.kind})")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
