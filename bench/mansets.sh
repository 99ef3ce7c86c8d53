#!/bin/sh
# The man-page retrieval set of bench/mansets.py: the Linux man-pages project's pages as Debian
# 12 packages them, pinned, so every machine builds the same queries and documents.
set -eu
apt-get update -qq
apt-get install -y --no-install-recommends groff-base manpages=6.03-2 manpages-dev=6.03-2
