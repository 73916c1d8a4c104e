#!/usr/bin/env bash
# Install the DICOM tools the tests and benchmarks use, when missing:
#   orthanc + orthanc-dicomweb  a local PACS with DICOMweb (QIDO-RS, WADO-RS, STOW-RS)
#   dicom3tools                 dciodvfy, the DICOM object validator
# As root with apt-get they are installed; otherwise one line says what is missing and the
# tests that need them skip with a reason. Always exits 0: nothing else depends on them.
set -uo pipefail

missing=()
command -v Orthanc >/dev/null 2>&1 || missing+=(orthanc)
plugin_found=0
for folder in /usr/share/orthanc/plugins /usr/lib/orthanc /usr/local/share/orthanc/plugins; do
  if compgen -G "$folder/libOrthancDicomWeb.so*" >/dev/null; then plugin_found=1; break; fi
done
[ "$plugin_found" = 1 ] || missing+=(orthanc-dicomweb)
command -v dciodvfy >/dev/null 2>&1 || missing+=(dicom3tools)

if [ "${#missing[@]}" = 0 ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "DICOM tools missing (${missing[*]}): install them with your package manager" \
       "(apt-get install ${missing[*]}); the tests that need them are skipped." >&2
  exit 0
fi
echo "Installing ${missing[*]} (apt-get)..." >&2
# the Debian package starts an Orthanc service; the tests start their own server instead
if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing[@]}") >/dev/null 2>&1; then
  exit 0
fi
echo "apt-get could not install ${missing[*]}; the tests that need them are skipped." >&2
exit 0
