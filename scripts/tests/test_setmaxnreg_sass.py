"""The setmaxnreg probe's SASS (tests/tc/sm90a/registers_probe_body.cuh), without a GPU.
Built for sm_90a, its kernel starts at 168 registers a thread (ptxas -v), lowers to 24
and raises to 240 (USETMAXREG.DEALLOC 0x18, USETMAXREG.TRY_ALLOC 0xf0), holds every word
in registers (no local memory) and uses registers above the entry's 168 and below 240.
Only the raise lets ptxas put them there: with the wrapper a no-op, the raised code
spills and stays under 168. So the probe's words on the GPU depend on the registers the
raise was granted. Skips, saying why, without nvcc or cuobjdump."""
import os
import re
import subprocess

from cuda_tools import nvcc_and_cuobjdump
from repo_paths import REPO

PROBE = "tests/tc/sm90a/registers_probe_sm90a.cu"
ENTRY, LOWERED, RAISED = 168, 24, 240


def test_setmaxnreg_probe_uses_the_raised_registers(tmp_path):
    nvcc, cuobjdump = nvcc_and_cuobjdump()
    cubin = tmp_path / "probe.cubin"
    built = subprocess.run([nvcc, "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
                            "-Isrc", "-I.", "-Itests", "-cubin", "-Xptxas", "-v", PROBE, "-o", str(cubin)],
                           cwd=REPO, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert re.findall(r"Used (\d+) registers", built.stderr) == [str(ENTRY)], built.stderr
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + ":" + os.environ.get("PATH", ""))
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=True).stdout
    lowered = re.findall(r"USETMAXREG\.DEALLOC\S* (0x[0-9a-f]+)", sass)
    raised = re.findall(r"USETMAXREG\.TRY_ALLOC\S* UP\d, (0x[0-9a-f]+)", sass)
    assert (lowered, raised) == ([hex(LOWERED)], [hex(RAISED)]), f"lowered to {lowered}, raised to {raised}"
    assert not re.search(r"\b(LDL|STL)\b", sass), "the probe's words went to local memory"
    highest = max(int(r) for r in re.findall(r"\bR(\d+)\b", sass))
    assert ENTRY <= highest < RAISED, f"highest register R{highest}: expected R{ENTRY}..R{RAISED - 1}"
