# Apply a patch series (see recipes/patches/*/series) to a git checkout, in order: a local patch file, an upstream
# commit fetched by SHA, or a published patch fetched by URL and refused unless its sha256 matches. Each is checked
# with `git apply --check` first and applied only if it applies; the first entry that cannot be fetched, does not
# match its sha256 or does not apply stops the build, naming it.
# Usage: apply_patches.sh PATCH_DIR SOURCE_DIR
# lib.sh: strict mode and the proxy CA (GIT_SSL_CAINFO, CURL_CA_BUNDLE) for the fetches.
source "$(dirname "$0")/lib.sh"
patch_dir=$(cd "$1" && pwd)
cd "$2"
where=$(git rev-parse --short HEAD)
count=0
while read -r kind ref third fourth _; do
  case "$kind" in "" | "#"*) continue ;; esac
  case "$kind" in
    patch) file="$patch_dir/$ref" ;;
    commit)
      git fetch -q --depth=2 origin "$ref" || {
        echo "envbuild: cannot fetch upstream commit $ref ($third)" >&2
        exit 1
      }
      file=$(mktemp)
      git diff --binary "$ref^" "$ref" >"$file"
      ;;
    url)
      want=${third#sha256:}
      file=$(mktemp)
      # https only (file: for tests); the series grammar (builder.plan.recipes) admits https URLs at a pinned commit
      curl -fsSL --retry 3 --proto '=https,file' --proto-redir '=https' -o "$file" "$ref" || {
        echo "envbuild: cannot fetch patch $ref ($fourth)" >&2
        exit 1
      }
      got=$(sha256sum "$file" | cut -d' ' -f1)
      if [ "$got" != "$want" ]; then
        echo "envbuild: patch $ref has sha256 $got, the series pins $want; refusing it" >&2
        exit 1
      fi
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
