"""The self-contained install script for a rendered harness, and the record it leaves.

:func:`install_script` turns ``{path: text}`` into a POSIX ``sh`` program (pure: the
text is returned, nothing runs here). The script carries every file inline, as a
single-quoted ``printf`` argument (exact bytes, no trailing newline added), and no
token: it never calls Reef back. Run as ``sh install.sh [--uninstall] [DEST]``
(``DEST`` defaults to ``./reef-harness``); ``REEF_HARNESS_FORCE=1`` lets it overwrite
or remove files changed since they were installed.

Order of work of an install (a crash at any step leaves the previous install whole,
or the new files in place without a record, which the next run rewrites):

1. Read ``DEST/.reef-harness-release`` (the record of the previous install, if any).
   If it names this release and digest and every recorded file still has its sha256,
   print ``already current`` and stop: nothing is written.
2. Refuse (exit 3) if a recorded file was changed since it was installed (tampered),
   unless forced; a file that is gone is simply written again.
3. Write every file into a staging folder inside ``DEST``; check each file's sha256
   and the tree digest (the sha256 of the ``sha256sum``-style listing, paths sorted).
   A mismatch removes the staging folder and exits 4; ``DEST`` is untouched.
4. Move each staged file into place (``mv`` within one file system).
5. Remove the files the previous record lists that the new tree lacks (pruning empty
   folders they leave), then the staging folder.
6. Write the new record last (to a temporary name, then ``mv``).

The record is line-oriented so ``sh`` can read it: ``release_id``, ``scenario``,
``adapter``, ``digest``, then one ``file <sha256> <path>`` per file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from reef.harness.adapters import AdapterSpec
from reef.harness.errors import HarnessTreeError
from reef.harness.tree import safe_path

RECORD_FILE: Final = ".reef-harness-release"
DEFAULT_DEST: Final = "./reef-harness"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def listing(files: Mapping[str, str]) -> str:
    """``<sha256>  <path>`` per file, paths sorted (what ``sha256sum`` prints)."""
    return "".join(f"{sha256_text(files[p])}  {p}\n" for p in sorted(files))


def tree_digest(files: Mapping[str, str]) -> str:
    """The digest an install verifies: the sha256 of :func:`listing`."""
    return sha256_text(listing(files))


@dataclass(frozen=True, slots=True)
class InstallRecord:
    """What ``DEST/.reef-harness-release`` says was installed."""

    release_id: str
    scenario: str
    adapter: str
    digest: str
    files: Mapping[str, str]  #: path → sha256

    def text(self) -> str:
        head = [
            "# written by a Reef harness install script; do not edit",
            f"release_id {self.release_id}",
            f"scenario {self.scenario}",
            f"adapter {self.adapter}",
            f"digest {self.digest}",
        ]
        return "\n".join(head + [f"file {self.files[p]} {p}" for p in sorted(self.files)]) + "\n"

    @classmethod
    def parse(cls, text: str) -> InstallRecord:
        fields: dict[str, str] = {}
        files: dict[str, str] = {}
        for line in text.splitlines():
            key, _, rest = line.partition(" ")
            if key == "file":
                sha, _, path = rest.partition(" ")
                files[safe_path(path)] = sha
            elif key and not key.startswith("#"):
                fields[key] = rest
        missing = {"release_id", "scenario", "adapter", "digest"} - set(fields)
        if missing:
            raise HarnessTreeError(f"install record lacks {sorted(missing)}")
        return cls(
            fields["release_id"], fields["scenario"], fields["adapter"], fields["digest"], files
        )


def _quote(text: str) -> str:
    """``text`` as one single-quoted sh word (a quote becomes ``'\\''``)."""
    return "'" + text.replace("'", "'\\''") + "'"


def install_script(
    files: Mapping[str, str], *, spec: AdapterSpec, scenario: str, release_id: str
) -> str:
    """The POSIX sh program installing ``files`` (rendered for ``spec``) as ``release_id``."""
    if not files:
        raise HarnessTreeError(f"release {release_id} renders no file for {spec.name}")
    paths = [safe_path(p) for p in sorted(files)]
    record = InstallRecord(
        release_id,
        scenario,
        spec.name,
        tree_digest(files),
        {p: sha256_text(files[p]) for p in paths},
    )
    parts = [
        _HEAD.format(
            release=release_id,
            scenario=scenario,
            adapter=spec.name,
            agent=spec.agent,
            count=len(paths),
            default_dest=DEFAULT_DEST,
            # the values the script reads, each one quoted sh word whatever it holds
            release_q=_quote(release_id),
            adapter_q=_quote(spec.name),
            digest_q=_quote(record.digest),
            record_file_q=_quote(RECORD_FILE),
            agent_q=_quote(spec.agent),
            root_env_q=_quote(spec.root_env or ""),
        ),
        "expected_listing() {\n  cat <<'REEF_LISTING'\n" + listing(files) + "REEF_LISTING\n}\n",
        "new_record() {\n  cat <<'REEF_RECORD'\n" + record.text() + "REEF_RECORD\n}\n",
        "stage_files() {\n",
    ]
    for path in paths:
        parts.append(f"  put {_quote(path)} {_quote(files[path])}\n")
    parts.append("}\n")
    parts.append(_BODY)
    return "".join(parts)


_HEAD: Final = """\
#!/bin/sh
# Reef harness install: scenario {scenario}, release {release}, adapter {adapter} ({agent}).
# Self-contained: every file is below, no token inside, nothing is fetched.
# Usage: sh install.sh [--uninstall] [DEST]      (DEST defaults to {default_dest})
# REEF_HARNESS_FORCE=1 overwrites or removes files changed since they were installed.
set -euf
umask 022
RELEASE={release_q}
ADAPTER={adapter_q}
DIGEST={digest_q}
COUNT={count}
RECORD={record_file_q}
AGENT={agent_q}
ROOT_ENV={root_env_q}
MODE=install
if [ "${{1:-}}" = --uninstall ]; then MODE=uninstall; shift; fi
DEST=${{1:-{default_dest}}}
case $DEST in -*) DEST=./$DEST ;; esac

"""

_BODY: Final = r"""
say() { printf 'reef-harness: %s\n' "$*"; }
die() { code=$1; shift; printf 'reef-harness: error: %s\n' "$*" >&2; exit "$code"; }

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum <"$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 <"$1" | cut -d' ' -f1
  elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 <"$1" | sed 's/^.*= *//'
  else die 5 "no sha256 tool (sha256sum, shasum or openssl) found"
  fi
}

safe() {
  case $1 in
    /*|..|../*|*/..|*/../*|'') die 2 "refusing unsafe path '$1'" ;;
  esac
}

# the recorded files of the previous install: "<sha256> <path>" lines
recorded() {
  [ -f "$DEST/$RECORD" ] || return 0
  sed -n 's/^file //p' "$DEST/$RECORD"
}

record_field() {
  [ -f "$DEST/$RECORD" ] || return 0
  sed -n "s/^$1 //p" "$DEST/$RECORD" | head -n 1
}

# recorded files whose bytes changed since they were installed (gone files are not)
changed_files() {
  recorded | while read -r sum path; do
    safe "$path"
    if [ -f "$DEST/$path" ] && [ "$(sha256_of "$DEST/$path")" != "$sum" ]; then
      printf '%s\n' "$path"
    fi
  done
}

all_intact() {
  recorded | while read -r sum path; do
    if [ ! -f "$DEST/$path" ] || [ "$(sha256_of "$DEST/$path")" != "$sum" ]; then
      echo broken
    fi
  done
}

refuse_if_changed() {
  changed=$(changed_files)
  if [ -n "$changed" ] && [ "${REEF_HARNESS_FORCE:-}" != 1 ]; then
    printf 'reef-harness: changed since installed: %s\n' $changed >&2
    die 3 "$DEST has files changed since they were installed (REEF_HARNESS_FORCE=1 to $1 them)"
  fi
}

prune_dirs() {
  dir=$(dirname "$1")
  while [ "$dir" != . ] && rmdir "$DEST/$dir" 2>/dev/null; do dir=$(dirname "$dir"); done
}

put() {
  safe "$1"
  mkdir -p "$(dirname "$STAGE/$1")"
  printf '%s' "$2" >"$STAGE/$1"
}

verify_stage() {
  expected_listing | while read -r sum path; do
    [ "$(sha256_of "$STAGE/$path")" = "$sum" ] || echo "$path"
  done >"$STAGE.bad"
  if [ -s "$STAGE.bad" ]; then
    bad=$(cat "$STAGE.bad"); rm -rf "$STAGE" "$STAGE.bad"
    die 4 "sha256 mismatch after writing: $bad"
  fi
  expected_listing >"$STAGE.bad"
  got=$(sha256_of "$STAGE.bad"); rm -f "$STAGE.bad"
  [ "$got" = "$DIGEST" ] || { rm -rf "$STAGE"; die 4 "tree digest $got, expected $DIGEST"; }
}

install_tree() {
  if [ "$(record_field release_id)" = "$RELEASE" ] && [ "$(record_field digest)" = "$DIGEST" ] \
      && [ -z "$(all_intact)" ]; then
    say "already current: release $RELEASE ($ADAPTER) in $DEST"
    exit 0
  fi
  [ -d "$DEST" ] || mkdir -p "$DEST"
  refuse_if_changed overwrite
  STAGE="$DEST/.reef-harness-staging.$$"
  rm -rf "$STAGE"; mkdir "$STAGE"
  trap 'rm -rf "$STAGE" "$STAGE.bad"' EXIT
  stage_files
  verify_stage
  expected_listing | while read -r sum path; do
    mkdir -p "$(dirname "$DEST/$path")"
    mv -f "$STAGE/$path" "$DEST/$path"
  done
  removed=0
  for path in $(recorded | cut -d' ' -f2-); do
    if ! expected_listing | cut -d' ' -f3- | grep -qxF "$path"; then
      safe "$path"; rm -f "$DEST/$path"; prune_dirs "$path"; removed=$((removed + 1))
      say "removed $path (not in release $RELEASE)"
    fi
  done
  rm -rf "$STAGE"
  new_record >"$DEST/$RECORD.tmp"
  mv -f "$DEST/$RECORD.tmp" "$DEST/$RECORD"
  say "installed release $RELEASE into $DEST ($ADAPTER; files: $COUNT written, $removed removed)"
  say "verified sha256 $DIGEST"
  if [ -n "$ROOT_ENV" ]; then
    say "point $AGENT at it: export $ROOT_ENV=\"$(cd "$DEST" && pwd)\""
  fi
}

uninstall_tree() {
  [ -f "$DEST/$RECORD" ] || die 1 "no Reef harness is installed in $DEST"
  refuse_if_changed remove
  for path in $(recorded | cut -d' ' -f2-); do
    safe "$path"; rm -f "$DEST/$path"; prune_dirs "$path"
  done
  rm -f "$DEST/$RECORD"
  rmdir "$DEST" 2>/dev/null || true
  say "uninstalled the Reef harness from $DEST"
}

if [ "$MODE" = uninstall ]; then uninstall_tree; else install_tree; fi
"""
