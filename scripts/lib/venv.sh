# make_venv DIR PACKAGE...: a virtualenv at DIR with PACKAGEs installed (pip from PyPI).
#
# `python3 -m venv` bootstraps pip with ensurepip, which a Python may lack or fail at (Debian's
# without python3-venv; a half-written DIR from an interrupted run; a full disk). Then the venv is
# made without pip and the host's pip installs into it (`pip --python`, pip >= 22.3), so the tools
# still land in DIR. Sourced by scripts/install-test-deps.sh, scripts/check-deploy.sh and
# scripts/llama/build.sh.
make_venv() {
    local dir=$1
    shift
    if python3 -m venv --clear "$dir"; then
        "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
    else
        echo "make_venv: ensurepip failed in $dir (free space: $(df -h "$(dirname "$dir")" | awk 'NR==2 {print $4}')); installing with the host's pip" >&2
        python3 -m venv --clear --without-pip "$dir"
        python3 -m pip --python "$dir/bin/python" install --quiet --disable-pip-version-check "$@"
    fi
}
