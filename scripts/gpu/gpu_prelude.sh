# Sourced by scripts/gpu/gpu_env.sh: what a GPU script checks before it spends any GPU time.
# gpu_environment_report writes the versions the numbers depend on; gpu_resolve_libraries
# makes sure every binary of the build loads, or stops the script with exit code 3 and the
# names of the missing libraries. Both append "key: value" lines to one report file, the
# first file a GPU window writes.

# gpu_report_line FILE KEY VALUE...: one "key: value" line into FILE (and the log).
gpu_report_line() {
  local file="$1" key="$2"
  shift 2
  echo "$key: $*" | tee -a "$file"
}

# gpu_environment_report FILE: the date, the GPU and driver (nvidia-smi), its SM clocks and
# power limit (the attention model turns measured times into clocks), the kernel, nvcc,
# Python with torch (and whether it sees a GPU), triton and transformers, and the tools a
# window uses (compute-sanitizer, mpirun), and the profilers a later window could use (nsys,
# ncu). A tool that is missing says so; nothing here fails.
gpu_environment_report() {
  local file="$1" nvcc
  gpu_report_line "$file" date "$(date -u +%FT%TZ)"
  gpu_report_line "$file" build_commit "$COMMIT"
  # The device tool copies the working tree under a git folder that can be older (the H200
  # windows of 6c903e5 said a9db2df): a checkout that differs from its HEAD says so.
  local head changed
  head="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo 'unknown (no git here)')"
  changed="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
  (( changed > 0 )) && head+=" with $changed tracked files changed (the scripts that ran are the tree's, not this commit's)"
  gpu_report_line "$file" checkout_commit "$head"
  gpu_report_line "$file" gpu "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  gpu_report_line "$file" gpu_clocks "$(nvidia-smi --query-gpu=clocks.max.sm,clocks.applications.graphics,power.limit \
    --format=csv 2>&1 | tr '\n' ' ' | head -c 300)"
  gpu_report_line "$file" kernel "$(uname -r), $(nproc) cpus"
  nvcc="$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)"
  [[ -n "$nvcc" ]] && nvcc="$("$nvcc" --version 2>&1 | grep -i release | head -1)"
  gpu_report_line "$file" nvcc "${nvcc:-not found}"
  python3 - <<'PY' 2>&1 | tee -a "$file"
import importlib, sys
print(f"python: {sys.version.split()[0]} {sys.executable}")
for name in ("torch", "triton", "transformers"):
    try:
        m = importlib.import_module(name)
        extra = ""
        if name == "torch":
            ok = m.cuda.is_available()
            extra = f" (cuda {m.version.cuda}; {'device ' + m.cuda.get_device_name(0) if ok else 'no GPU visible'})"
        print(f"{name}: {m.__version__}{extra}")
    except Exception as e:  # the report says what is missing; the steps that need it fail on their own
        print(f"{name}: not importable ({type(e).__name__}: {str(e)[:160]})")
PY
  gpu_report_line "$file" compute-sanitizer "$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo 'not found')"
  gpu_report_line "$file" mpirun "$(command -v mpirun || echo 'not found')"
  gpu_report_line "$file" nsys "$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || echo 'not found')"
  gpu_report_line "$file" ncu "$(gpu_find_ncu || echo 'not found')"
}

# gpu_find_ncu: the path of Nsight Compute's ncu (PATH, the CUDA toolkit, or the image's
# /opt/nvidia/nsight-compute/VERSION/), else nothing and status 1.
gpu_find_ncu() {
  local p
  for p in "$(command -v ncu)" /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [[ -n "$p" && -x "$p" ]] && { echo "$p"; return 0; }
  done
  return 1
}

# gpu_machine_libraries CMD...: CMD with the machine's library path, not the pack's (the
# rule gpu_env.sh's python3 follows, for a tool such as ncu that is not Python).
gpu_machine_libraries() { LD_LIBRARY_PATH="${GPU_PYTHON_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}" "$@"; }

# gpu_missing_libraries BIN...: "BIN: LIBRARY" for each library the loader cannot find.
gpu_missing_libraries() {
  local bin
  for bin in "$@"; do
    ldd "$bin" 2>&1 | awk -v bin="${bin##*/}" '/not found/ {print bin ": " $1}'
  done
}

# gpu_nvidia_lib_dirs: the library folders of the NVIDIA Python packages (nvidia/nccl/lib,
# nvidia/cu13/lib, nvidia/cublas/lib, ...) in python3's site-packages, or in the folders
# of GPU_SITE_PACKAGES (colon-separated) when set; colon-separated.
gpu_nvidia_lib_dirs() {
  local sites site dir dirs=""
  if [[ -n "${GPU_SITE_PACKAGES:-}" ]]; then
    sites="${GPU_SITE_PACKAGES//:/ }"
  else
    sites="$(python3 -c 'import site, sysconfig; print(" ".join(dict.fromkeys(site.getsitepackages() + [sysconfig.get_paths()[k] for k in ("purelib", "platlib")])))' 2>/dev/null)"
  fi
  for site in $sites; do
    for dir in "$site"/nvidia/*/lib; do
      [[ -d "$dir" ]] && dirs="${dirs:+$dirs:}$dir"
    done
  done
  echo "$dirs"
}

# gpu_resolve_libraries FILE BIN...: every BIN must load. Libraries the machine lacks
# (libnccl.so.2, libcudart.so.13 and libcublas*.so.13 are not packed) are looked for in
# the NVIDIA Python packages' folders, which are then added to LD_LIBRARY_PATH; if one is
# still missing, the script stops here with exit code 3, before any GPU time is spent.
# FILE receives what was missing, the folders added and where the CUDA libraries resolved.
gpu_resolve_libraries() {
  local file="$1" missing dirs
  shift
  set -- $(printf '%s\n' "$@" | awk '!seen[$0]++')  # each binary once (paths have no spaces)
  command -v ldd > /dev/null || { gpu_report_line "$file" libraries "cannot check: no ldd"; return; }
  missing="$(gpu_missing_libraries "$@")"
  if [[ -n "$missing" ]]; then
    gpu_report_line "$file" missing_with_the_pack_alone "$(echo "$missing" | paste -sd ';')"
    dirs="$(gpu_nvidia_lib_dirs)"
    gpu_report_line "$file" library_fallback "${dirs:-no NVIDIA Python package folders found}"
    if [[ -n "$dirs" ]]; then
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dirs"
      [[ -n "${GPU_PYTHON_LIBRARY_PATH+set}" ]] && export GPU_PYTHON_LIBRARY_PATH="${GPU_PYTHON_LIBRARY_PATH:+$GPU_PYTHON_LIBRARY_PATH:}$dirs"
    fi
    missing="$(gpu_missing_libraries "$@")"
    if [[ -n "$missing" ]]; then
      gpu_report_line "$file" libraries_missing "$(echo "$missing" | paste -sd ';')"
      echo "gpu: shared libraries missing (neither packed, on this machine, nor in the NVIDIA Python packages):"
      echo "$missing" | sed 's/^/  /'
      echo "gpu: stopping before any GPU time is spent (exit 3); see $file"
      exit 3
    fi
  fi
  gpu_report_line "$file" libraries "every binary loads ($*)"
  gpu_report_line "$file" LD_LIBRARY_PATH "${LD_LIBRARY_PATH:-}"
  gpu_report_line "$file" python_LD_LIBRARY_PATH "${GPU_PYTHON_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}"
  ldd "$1" 2>/dev/null | awk '/libcuda|libcudart|libcublas|libnccl/ {print "resolved: " $1 " => " $3}' | tee -a "$file"
}
