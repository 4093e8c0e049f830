# Shared by scripts/run and scripts/test.
setup_venv() {
  local extras="$1"
  local py="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
  fi
  local stamp=".venv/.installed${extras:+-$extras}"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    touch "$stamp"
  fi
}
