# Apply a patch series (see recipes/patches/*/series) to a git checkout: each entry is checked with
# `git apply --check` first and applied only if it applies; the first one that does not stops the build.
# Usage: apply_patches.sh PATCH_DIR SOURCE_DIR
# lib.sh: strict mode and the proxy CA (GIT_SSL_CAINFO) for the `git fetch` of commit entries.
source "$(dirname "$0")/lib.sh"
patch_dir=$(cd "$1" && pwd)
cd "$2"
where=$(git rev-parse --short HEAD)
count=0
while read -r kind ref url _; do
  case "$kind" in "" | "#"*) continue ;; esac
  case "$kind" in
    patch) file="$patch_dir/$ref" ;;
    commit)
      git fetch -q --depth=2 origin "$ref" || {
        echo "envbuild: cannot fetch upstream commit $ref ($url)" >&2
        exit 1
      }
      file=$(mktemp)
      git diff --binary "$ref^" "$ref" >"$file"
      ;;
    *)
      echo "envbuild: unknown series entry '$kind' in $patch_dir/series" >&2
      exit 1
      ;;
  esac
  if ! git apply --check "$file"; then
    echo "envbuild: $kind $ref does not apply to the source at $where; fix or drop it in $patch_dir/series" >&2
    exit 1
  fi
  git apply "$file"
  echo "applied $kind $ref"
  count=$((count + 1))
done <"$patch_dir/series"
echo "patch series: $count applied"
