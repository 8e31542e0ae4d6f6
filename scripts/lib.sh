# Shared set-up for the scripts: install what is missing (Debian/Ubuntu packages), find nvcc,
# configure and build a preset. Sourced, not run.

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PRESET="${FREEZEFRAME_PRESET:-release}"

log() { printf '== %s\n' "$*"; }

# Packages are installed only when something is missing, so a machine without network access
# but with everything present (the GPU test machine) never calls apt.
ensure_dependencies() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  ls /usr/lib/*/cmake/yaml-cpp/yaml-cpp-config.cmake /usr/lib/cmake/yaml-cpp/yaml-cpp-config.cmake \
     /usr/share/cmake/yaml-cpp/yaml-cpp-config.cmake >/dev/null 2>&1 || missing+=(libyaml-cpp-dev)
  ls /usr/lib/*/cmake/GTest/GTestConfig.cmake /usr/lib/cmake/GTest/GTestConfig.cmake \
     >/dev/null 2>&1 || missing+=(libgtest-dev)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! command -v nvcc >/dev/null; then
    for dir in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      if [ -x "$dir/nvcc" ]; then export PATH="$dir:$PATH"; break; fi
    done
  fi
  command -v nvcc >/dev/null || {
    echo "error: nvcc (CUDA toolkit 12.4 or newer) not found; install the CUDA toolkit" >&2
    exit 1
  }
}

configure_and_build() {
  cd "$ROOT"
  log "configure ($PRESET)"
  cmake --preset "$PRESET" >/dev/null
  log "build ($PRESET)"
  cmake --build --preset "$PRESET" "$@"
}
