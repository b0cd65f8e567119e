# Sourced by the scripts that build (test.sh, demo.sh, bench.sh, ...): one rule for reusing a
# build directory.
#   clear_foreign_build_dir DIR NAME   removes DIR if its CMake cache was made for another source
#                                      directory (a checkout copied or moved: CMake refuses such a
#                                      cache), saying so on stderr as NAME.
clear_foreign_build_dir() {
  local build_dir=$1 name=$2 cached_src
  [[ -f "$build_dir/CMakeCache.txt" ]] || return 0
  cached_src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build_dir/CMakeCache.txt")
  if [[ "$cached_src" != "$(pwd -P)" && "$cached_src" != "$(pwd)" ]]; then
    echo "$name: $build_dir was configured for $cached_src; removing it" >&2
    rm -rf "$build_dir"
  fi
}
