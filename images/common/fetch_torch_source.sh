# The torch source into /src/pytorch: $TORCH_GIT_URL at $TORCH_GIT_REF (a tag or a release branch), or, when
# $TORCH_GIT_COMMIT is set (recipes/source-builds.toml: the commit a peer built), exactly that commit,
# checked after the fetch. Submodules are fetched with their full history, as vLLM's
# docker/Dockerfile.rocm_base does (`git submodule update --init --recursive`): a shallow submodule fetch of a
# commit that is not a branch tip depends on the server allowing it.
source "$(dirname "$0")/lib.sh"
if [ -n "${TORCH_GIT_COMMIT:-}" ]; then
  git init -q /src/pytorch
  git -C /src/pytorch remote add origin "$TORCH_GIT_URL"
  git -C /src/pytorch fetch -q --depth 1 origin "$TORCH_GIT_COMMIT"
  git -C /src/pytorch checkout -q FETCH_HEAD
  head=$(git -C /src/pytorch rev-parse HEAD)
  if [ "$head" != "$TORCH_GIT_COMMIT" ]; then
    echo "envbuild: $TORCH_GIT_URL gave $head for commit $TORCH_GIT_COMMIT" >&2
    exit 1
  fi
else
  git clone -q --depth 1 --branch "$TORCH_GIT_REF" "$TORCH_GIT_URL" /src/pytorch
fi
git -C /src/pytorch submodule update -q --init --recursive --jobs 4
if [ -n "${TORCH_GIT_COMMIT:-}" ]; then
  git -C /src/pytorch log -1 --format="torch source at %H ($TORCH_GIT_URL, the commit pinned for ${TORCH_GIT_REF})"
else
  git -C /src/pytorch log -1 --format="torch source at %H ($TORCH_GIT_URL ${TORCH_GIT_REF})"
fi
