#!/usr/bin/env bash
# The GPU checks of issues 3 and 4 as one prepared run, for a session that is lent a GPU machine
# (15 minutes of device time in all: one call, then give the machine back).
#
#   here, once:  echo /.whl/ >> .git/info/exclude
#                python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                  --implementation cp --platform manylinux_2_28_x86_64 -d .whl libcst==1.9.0
#   device call: run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=570)
#
# A call may run 10 minutes at most; the steps' own timeouts below add up to 9, so a hung step
# still leaves the later ones their turn and the log comes back.
#
# That machine's image has python3 with a CUDA torch, nvcc, ninja, click, pytest and hypothesis,
# but not libcst (gradlint check needs it): it travels as the wheel above. Every step runs even if
# one before it failed; the log and the JSON land in $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $1 ($(date +%T))"; }
{
  step "machine"
  nvidia-smi -L || echo "no nvidia-smi"
  nvcc --version | tail -1 || echo "no nvcc"
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"

  step "install gradlint and libcst into /tmp/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir --target /tmp/site . \
    || echo "install failed"
  # PYTHONSAFEPATH is -P for every interpreter, the tests' subprocesses too: the repository's own
  # gradlint/ must not shadow the installed one (rules/, runtime_probe/ and cuda_ext/ join it only
  # when installed). Without it `python -c` in a test found the repository's copy.
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONSAFEPATH=1
  python3 -P -c "import gradlint.rules, libcst; print('gradlint from', gradlint.__file__)"

  step "the image's compiler (CXX=${CXX:-c++}): is the library it builds used?"
  GRADLINT_EXT_CACHE=/tmp/ext-image timeout 60 python3 -c "import gradlint.cuda_ext as e; b = e.load(); print(b.name, b.fallback_reason)"
  # The image's /opt/gcc/bin/g++ links libstdc++ into the library, whose errors then end the
  # process (seen 2026-12-04): the op falls back to the reference and says so. The system g++
  # builds the kernels for the steps below.
  if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++; fi

  step "the bundled op's tests, CUDA ones included (the first builds the kernels)"
  timeout 150 python3 -P -m pytest -q -p no:cacheprovider -o addopts= tests/test_cuda_ext.py tests/test_cuda_ext_build.py

  step "bench/scatter.py --device cuda"
  timeout 60 python3 bench/scatter.py --device cuda --reps 21

  step "gradlint probe --device cuda (the bundled scenarios on the GPU)"
  timeout 90 python3 -P -m gradlint probe --device cuda --steps 60 --quiet --json "$OUT/probe_cuda.json"
  echo "probe exit code $?"

  step "gradlint probe on a training script that keeps its CUDA losses (the allocator's slope)"
  cat > /tmp/cuda_train_leaky.py <<'PY'
import torch
from torch import nn

model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
losses = []
for _ in range(80):
    x = torch.randn(64, 256, device="cuda")
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    losses.append(loss)  # keeps every step's graph on the GPU
PY
  timeout 60 python3 -P -m gradlint probe --device cuda --steps 60 --quiet --json "$OUT/probe_script_cuda.json" /tmp/cuda_train_leaky.py
  echo "probe exit code $?"

  step "the probe's API and CLI tests with a GPU present"
  timeout 100 python3 -P -m pytest -q -p no:cacheprovider -o addopts= tests/test_probe_api.py tests/test_probe_cli.py
} 2>&1 | tee "$LOG"
