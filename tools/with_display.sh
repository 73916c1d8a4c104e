#!/usr/bin/env bash
# Run a command with a display napari can render to.
# With --optional, a machine with no display and no way to get one runs the
# command headless (MEDVL_HEADLESS=1) instead of failing.
set -euo pipefail
optional=0
if [ "${1:-}" = "--optional" ]; then optional=1; shift; fi

packages=(xvfb xauth libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0
          libxcb-xinerama0 libxcb-xkb1 libxcb-randr0 libxcb-shape0 libxcb-cursor0
          libxkbcommon-x11-0 libgl1 libegl1)

have_xcb_libs() {
  command -v ldconfig >/dev/null 2>&1 || return 0
  local libraries  # grep -q would close the pipe early: under pipefail, a false "missing"
  libraries="$(ldconfig -p)"
  grep -q libxcb-cursor.so <<<"$libraries" && grep -q libxkbcommon-x11.so <<<"$libraries"
}

if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
  exec "$@"
fi

if { ! command -v xvfb-run >/dev/null 2>&1 || ! have_xcb_libs; } \
   && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Xvfb and the Qt xcb libraries (apt-get)..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}") >/dev/null \
    || echo "apt-get could not install Xvfb; continuing without it." >&2
fi

if command -v xvfb-run >/dev/null 2>&1; then
  export QT_QPA_PLATFORM=xcb
  exec xvfb-run -a -s "-screen 0 1600x1000x24" "$@"
fi

if [ "$optional" = "1" ]; then
  export MEDVL_HEADLESS=1
  exec "$@"
fi
echo "No display and no Xvfb: install xvfb (apt-get install xvfb) or set DISPLAY." >&2
exit 2
