#!/usr/bin/env bash
# The GPU check: scripts/gpu_lease.sh under its earlier name (same options, same output).
exec bash "$(dirname "$0")/gpu_lease.sh" "$@"
