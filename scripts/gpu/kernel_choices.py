#!/usr/bin/env python3
"""The attention-kernel choices a kdtrain binary offers, as scripts/peers/bench_attention.py
--kdtrain-build specs (one per line), so the GPU window times every kernel the binary can
run without a list of them written here:

  python3 scripts/gpu/kernel_choices.py KDTRAIN

Every config key of `kdtrain config --list` whose name holds "attention" and whose choices
include "auto" is a run-time kernel choice (train.attention_forward and
train.attention_backward): one spec per choice other than auto,
"KEY:CHOICE=KDTRAIN --set KEY=CHOICE". A choice a binary refuses at some head dim gives an
error row in the timings, not a failure.
"""
import os
import re
import shlex
import subprocess
import sys

_ROW = re.compile(r"^(\S*attention\S*)\s+\S+\s+.*; accepts (.+)$")


def config_choices(listing):
    """{key: [choice, ...]} of the run-time kernel choices in a `config --list` table."""
    out = {}
    for line in listing.splitlines():
        m = _ROW.match(line.strip())
        if m:
            choices = [c.strip() for c in m.group(2).split(",")]
            if "auto" in choices:
                out[m.group(1)] = [c for c in choices if c != "auto"]
    return out


def specs(binary, listing):
    """The --kdtrain-build specs of `binary`, from its config listing."""
    return [f"{key}:{c}={shlex.quote(binary)} --set {key}={c}"
            for key, choices in config_choices(listing).items() for c in choices]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    binary = argv[0]
    env = dict(os.environ)
    if "KDTRAIN_LD_LIBRARY_PATH" in env:  # the GPU scripts keep the pack's libraries from Python
        env["LD_LIBRARY_PATH"] = env["KDTRAIN_LD_LIBRARY_PATH"]
    p = subprocess.run([binary, "config", "--list"], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"kernel_choices: {binary} config --list failed: {p.stderr.strip()[-200:]}", file=sys.stderr)
        return 1
    for line in specs(binary, p.stdout):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
