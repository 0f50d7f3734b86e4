# Sourced by integration tests (test-manifests*.sh, test-service.sh,
# test-cdi.sh) and sched-lib.sh: python3 may be a version manager's shim
# (pyenv's is a shell script that forks some 40 processes: ~0.3 s a call on an idle
# machine, seconds on a loaded one). The interpreter it runs is looked up
# once, and every python3 of the test runs it directly.
mk_python3=$(command python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$mk_python3" ] ||
  mk_python3=$(command -v python3)
python3() { "$mk_python3" "$@"; }
