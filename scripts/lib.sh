# Shared by scripts/run and scripts/test.
setup_venv() {
  local extras="$1"
  local py="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
  fi
  local stamp=".venv/.installed${extras:+-$extras}"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "Installing Python packages into .venv (first run only)..." >&2
    if ! { .venv/bin/python -m pip install -q --upgrade pip &&
           .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"; } >.venv/pip.log 2>&1; then
      cat .venv/pip.log >&2
      return 1
    fi
    touch "$stamp"
  fi
}

# DEBUG for ./scripts/run: on for a loopback HOST (unless DEBUG is set), off
# for any other (unless DEBUG is set), and said so.
debug_for_host() {
  # Loopback addresses only: 127.0.0.1.nip.io is a name anyone can point anywhere.
  if [[ "$1" =~ ^127(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}$ ]] ||
     [ "$1" = localhost ] || [ "$1" = ::1 ] || [ "$1" = "[::1]" ]; then
    echo "${DEBUG:-1}"
  else
    echo "HOST=$1 is not loopback: DEBUG=${DEBUG:-0} (set ALLOWED_HOSTS for it)" >&2
    echo "${DEBUG:-0}"
  fi
}

# daphne's -e endpoint for HOST and PORT, with a large listen backlog.
daphne_endpoint() {
  local host="${1//[\[\]]/}" port="$2" kind=tcp
  case "$host" in *:*) kind=tcp6; host="${host//:/\\:}" ;; esac
  echo "$kind:port=$port:interface=$host:backlog=${LISTEN_BACKLOG:-4096}"
}
