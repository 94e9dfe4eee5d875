#!/usr/bin/env bash
# Keep the compatibility matrix's history across workflow runs (called by the generated workflow's report job).
# Usage: matrix_history.sh DATA_BRANCH ARTIFACTS_DIR DB
#
# The merged matrix.db of every earlier run lives on DATA_BRANCH of this repository (an orphan branch
# holding only that file, so its history is the matrix's history and it never touches the code). This
# run's database starts as that file, imports this run's artifacts (result.json files and per-job DBs;
# already-recorded runs are recognised, conflicting ones refused), and is committed back. A cell whose
# runner was offline this week keeps last week's evidence instead of turning "untested".
set -euo pipefail
branch=$1
artifacts=$2
db=$3
work=$(mktemp -d)
trap 'git worktree remove --force "$work" >/dev/null 2>&1 || true' EXIT

if git fetch --quiet --depth=1 origin "+refs/heads/$branch:refs/remotes/origin/$branch" 2>/dev/null; then
  git worktree add --quiet -B "$branch" "$work" "origin/$branch"
  if [ -f "$work/matrix.db" ]; then cp "$work/matrix.db" "$db"; fi
  echo "matrix history: $(git -C "$work" rev-list --count HEAD) earlier run(s) on $branch"
else
  git worktree add --quiet --detach "$work"
  git -C "$work" checkout --quiet --orphan "$branch"
  git -C "$work" rm -rf --quiet .
  echo "matrix history: no $branch branch yet; starting it"
fi

if [ -d "$artifacts" ] && [ -n "$(ls -A "$artifacts")" ]; then
  envbuild matrix import --skip-invalid --db "$db" "$artifacts"
else
  echo "matrix history: no artifacts from this run"
fi
if [ ! -f "$db" ]; then
  echo "matrix history: nothing recorded yet; nothing to keep"
  exit 0
fi
envbuild matrix check --db "$db"

cp "$db" "$work/matrix.db"
git -C "$work" add matrix.db
if git -C "$work" diff --cached --quiet; then
  echo "matrix history: unchanged"
  exit 0
fi
git -C "$work" -c user.name="envbuild-ci" -c user.email="envbuild-ci@users.noreply.github.com" \
  commit --quiet -m "matrix: ${GITHUB_RUN_ID:-local} $(date -u +%Y-%m-%dT%H:%MZ)"
git -C "$work" push --quiet origin "HEAD:refs/heads/$branch"
echo "matrix history: committed to $branch"
