# Sourced by bin/cosample and bin/test: make sure system tools and the virtual environment
# exist, then leave $VENV pointing at it. Idempotent and quiet when nothing is missing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${COSAMPLE_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}

# Debian packages: solvers, Open vSwitch, iperf3, pmacct (a peer sFlow collector), nginx, wrk,
# tcpdump and tshark (the application monitor's ground truth and peer, an independent sFlow decoder),
# tcpreplay (offers recorded traffic at a set frame rate: the live analyser's saturation benchmark),
# h2load (HTTP/2 load for the analyser's h2/h2c ground truth), nghttpx (a proxy that takes
# HTTP/1.1's Upgrade to h2c, which nginx does not), Prometheus (promtool
# and the server, for the operations tests) and the network tools the tests use.
need_system() {
    local missing=()
    command -v glpsol >/dev/null || missing+=(glpk-utils)
    command -v cbc >/dev/null || missing+=(coinor-cbc)
    # pip install -e . compiles the sFlow decoder's fast path (setup.py, collector/_sflow.c)
    command -v gcc >/dev/null || missing+=(gcc)
    [ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] ||
        missing+=(python3-dev)
    # ... and the plan slices' builder, which hashes with OpenSSL's libcrypto (cosample/plan/_slices.c)
    [ -f /usr/include/openssl/sha.h ] || missing+=(libssl-dev)
    [ "${1:-}" = full ] || { printf '%s\n' "${missing[@]}"; return; }
    command -v ovs-vswitchd >/dev/null || missing+=(openvswitch-switch)
    command -v iperf3 >/dev/null || missing+=(iperf3)
    command -v ethtool >/dev/null || missing+=(ethtool)
    command -v tc >/dev/null || missing+=(iproute2)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v sfacctd >/dev/null || missing+=(pmacct)
    command -v nginx >/dev/null || missing+=(nginx)
    command -v wrk >/dev/null || missing+=(wrk)
    command -v tcpdump >/dev/null || missing+=(tcpdump)
    command -v tcpreplay >/dev/null || missing+=(tcpreplay)
    command -v tshark >/dev/null || missing+=(tshark)
    command -v h2load >/dev/null || missing+=(nghttp2-client)
    command -v nghttpx >/dev/null || missing+=(nghttp2-proxy)
    command -v promtool >/dev/null || missing+=(prometheus)
    printf '%s\n' "${missing[@]}"
}

install_system() {
    local missing
    missing=$(need_system "${1:-}" | sort -u | tr '\n' ' ')
    [ -n "${missing// }" ] || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: not root, cannot install Debian packages: $missing (tests needing them skip)" >&2
        return 0
    fi
    echo "bootstrap: installing Debian packages: $missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing >/dev/null
}

# What the virtualenv was installed from: a change to any of these (a new lock from bin/lock
# included) means installing again.
install_stamp() {
    cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" "$ROOT/setup.py" "$ROOT/collector/_sflow.c" \
        "$ROOT/appmon/_fastpath.c" |
        sha256sum | cut -c1-16
}

install_python() {
    local extras=$1 stamp
    if ! "$PYTHON" -m venv --help >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
        apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null
    fi
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    stamp="$VENV/.cosample-$(install_stamp)-$extras"
    [ -f "$stamp" ] && return 0
    echo "bootstrap: installing cosample and its Python dependencies into $VENV" >&2
    # PIP_CONSTRAINT also reaches pip's isolated build of setup.py (setuptools, wheel)
    if ! { PIP_CONSTRAINT="$ROOT/constraints.txt" "$VENV/bin/python" -m pip install pip &&
           PIP_CONSTRAINT="$ROOT/constraints.txt" "$VENV/bin/python" -m pip install \
               -e "$ROOT[$extras]"; } >"$VENV/install.log" 2>&1; then
        tail -n 30 "$VENV/install.log" >&2
        echo "bootstrap: pip install failed; full log in $VENV/install.log" >&2
        exit 1
    fi
    rm -f "$VENV"/.cosample-*
    touch "$stamp"
}
