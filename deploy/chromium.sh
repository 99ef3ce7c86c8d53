#!/usr/bin/env bash
# `make setup`: Debian's chromium for the console's browser tests (tests/test_console.py, driven
# by Playwright's Python package with executable_path=/usr/bin/chromium; Playwright's own
# browser download is never used). Installed when missing and running as root with apt-get;
# otherwise says why not, and those tests skip. Never fails the setup.
set -uo pipefail

BROWSER=/usr/bin/chromium

if [ -x "$BROWSER" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "chromium: $BROWSER is missing and this is not root: the console's browser tests will" \
    "skip (install Debian's chromium package to run them)"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "chromium: $BROWSER is missing and there is no apt-get: the console's browser tests will skip"
  exit 0
fi
echo "chromium: installing Debian's chromium for the console's browser tests"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
  echo "chromium: apt-get could not install chromium: the console's browser tests will skip"
fi
exit 0
