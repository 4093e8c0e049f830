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
