# Helpers for the repository's Go modules (sourced by scripts/test, scripts/tidy, ...).
#
# Every directory with a go.mod is a module. Modules refer to each other by the placeholder
# version below until a release (scripts/release) writes the real tag, and each go.mod replaces
# the local modules it uses by their directories, so every module builds and tidies on its own
# (GOWORK=off) with exactly the code of this commit. Replace directives of dependencies are
# ignored by Go, so users outside the repository get the tagged versions.

MODULE_PREFIX=github.com/go-outbox/outbox
MODULE_PLACEHOLDER=v0.0.0-00010101000000-000000000000

# modules prints the module directories, root first (".", "bench", "cmd/outbox", ...).
modules() {
  find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' -printf '%h\n' |
    sed 's#^\./##' | sort | awk '$0 == "." { print; next } { rest[++n] = $0 } END { for (i = 1; i <= n; i++) print rest[i] }'
}

# module_path DIR prints the module path of the module in DIR.
module_path() {
  if [ "$1" = . ]; then echo "$MODULE_PREFIX"; else echo "$MODULE_PREFIX/$1"; fi
}

# relpath FROM TO prints TO relative to FROM (both relative to the repository root).
relpath() {
  local from=$1 to=$2 up=""
  [ "$from" = . ] && { echo "./$to"; return; }
  local d=$from
  while [ "$d" != . ]; do up="../$up"; d=$(dirname "$d"); done
  [ "$to" = . ] && { echo "${up%/}"; return; }
  echo "$up$to"
}

# module_of DIR prints the directory of the module that holds DIR (a path from the repository
# root, with or without ./ and a trailing /): the longest module directory that is a prefix.
module_of() {
  local path=${1#./} best=. m
  path=${path%/}
  while read -r m; do
    [ "$m" = . ] && continue
    if [ "$path" = "$m" ] || [[ $path == "$m"/* ]]; then [ ${#m} -gt ${#best} ] && best=$m; fi
  done < <(modules)
  echo "$best"
}

# package_in MODULE DIR prints DIR as a package path relative to MODULE (./..., ./sub/...).
package_in() {
  local path=${2#./}
  path=${path%/}
  if [ "$1" = . ]; then echo "./$path"; else echo ".${path#"$1"}"; fi
}
