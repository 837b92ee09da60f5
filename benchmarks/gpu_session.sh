#!/usr/bin/env bash
# A lent GPU machine's work in one `device` call per mode (the device tool of this workplace: a
# bare machine with torch, torchvision, torch-geometric, transformers and safetensors in its
# python3, nothing to download, outputs back through $OUT: at most 8 files of 16 MiB).
#
# Here, once, before the first call (the data and any run to continue travel in .gpu/, which git ignores):
#     mkdir -p .gpu/fashion-mnist, then write there the first 12,000 training and 2,000 test images and labels
#     as idx .gz files like the originals (all of them, with weights/, are over the 64 MiB a call carries)
# and copy the pure-Python packages the machine's image lacks:
#     mkdir -p .gpu/site && cp -r .venv/lib/python3*/site-packages/braceexpand .gpu/site/
# Then, one call each (carry: [".gpu"], or the parts of it a mode reads: .gpu/site and .gpu/fashion-mnist or .gpu/molecules.pt):
#     bash benchmarks/gpu_session.sh bench                  # ResNet-50, training and generation tables, tests/test_cuda.py
#     bash benchmarks/gpu_session.sh graphs                 # the CUDA-graph paths: their tests, generation, training
#     bash benchmarks/gpu_session.sh train resnet56_long    # TRAIN_SECONDS (default 420) of a recipe, then stops
#     bash benchmarks/gpu_session.sh sweep [VARIANT...]     # benchmarks/molecule_sweep.py on .gpu/molecules.pt
#         (written here first: .venv/bin/python benchmarks/molecule_sweep.py cache --out .gpu/molecules.pt)
# A `train` call needs the whole of Fashion-MNIST (30 MB) in .gpu/fashion-mnist-full (the four .gz files
# as the Debian package has them; carry it instead of .gpu/fashion-mnist). With the weights git tracks
# (52 MB) that is over 64 MiB, so for that call take out of the working tree the weight files the
# recipe does not read, and put them back after:
#     git ls-files 'weights/*.safetensors' | grep -v 'weights/resnet56.fmnist' | xargs rm   # then: git checkout -- weights
# A training call brings its run folder back as $OUT/run-TARGET.part-*; copy those parts into
# .gpu/ here and the next `train TARGET` call continues the run from its last epoch (the recipe's
# --run-dir). When the recipe ends, its weights, card, curves and entry are in $OUT/weights/.
# Locally, as a dry run of the script itself: PY=.venv/bin/python OUT=/tmp/gpu bash benchmarks/gpu_session.sh train
# resnet20 --epochs 1 --limit 64
set -uo pipefail
mode=${1:?usage: gpu_session.sh bench | graphs | train TARGET [recipe options] | sweep [VARIANT...]}
out=${OUT:-/tmp/zoo-gpu}
py=${PY:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out"

setup() {
    # zoo itself, offline, into the machine's python (its packages are the image's own)
    "$py" -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$out/setup.txt" 2>&1 || {
        cat "$out/setup.txt"
        exit 3
    }
    for data in .gpu/fashion-mnist-full .gpu/fashion-mnist; do # the whole set where it came, else the part
        if [ -d "$data" ] && [ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
            mkdir -p /usr/share/datasets/fashion-mnist && cp "$data"/*.gz /usr/share/datasets/fashion-mnist/
        fi
    done
    # pure-Python packages zoo needs that the image lacks (braceexpand, read on the fine-tuning data
    # path), copied here from .venv into .gpu/site; then every module a mode reads is imported once,
    # so a missing one stops the call at once rather than inside a pool of workers
    if [ -d .gpu/site ]; then export PYTHONPATH="$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}"; fi
    "$py" -c 'import torch, zoo, zoo.training.finetune, zoo.training.recipes.molecule_weights
print("torch", torch.__version__, "cuda", torch.cuda.is_available())' || exit 3
}

bench() {
    # the most wanted table first: a call stopped at its limit still brings back what is in $OUT
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
    timeout 230 "$py" benchmarks/cuda_inference.py --batch-sizes 1 64 256 --repeats 20 --profile \
        --csv "$out/cuda-inference.csv" 2>&1 | tee "$out/cuda_inference.txt"
    timeout 150 "$py" benchmarks/train_throughput.py --device cuda --steps 300 --repeats 3 --epochs 2 --seeds 2 --subset 12000 \
        --csv "$out/train-throughput-cuda.csv" 2>&1 | tr '\r' '\n' | grep -v 'it/s\]$' | tee "$out/train_throughput.txt"
    timeout 150 "$py" benchmarks/generate.py --device cuda --batches 1 8 --repeats 3 --compile --hf-static \
        2>&1 | tee "$out/generate.txt"
    timeout 90 "$py" -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$out/test_cuda.txt"
}

graphs() {
    # the CUDA-graph paths (generate's replayed decode step, training compiled under
    # "reduce-overhead"): their tests, then generation and training speed against the peers
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
    timeout 120 "$py" -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "decode_step or compiled_training" 2>&1 |
        tee "$out/test_cuda.txt"
    timeout 150 "$py" benchmarks/generate.py --device cuda --batches 1 8 --repeats 3 --compile --hf-static \
        2>&1 | tee "$out/generate.txt"
    timeout 250 "$py" benchmarks/train_throughput.py --device cuda --steps 300 --repeats 2 --epochs 0 --compile \
        --only tutorial 16-mixed default "fp16 +" "bf16 + channels_last + compile" \
        --csv "$out/train-throughput-cuda-graphs.csv" 2>&1 | tr '\r' '\n' | grep -v 'it/s\]$' | tee "$out/train_throughput.txt"
}

train() {
    local target=${1:?train needs a recipe target, e.g. resnet56_long}
    shift
    local run=".gpu/run-$target"
    "$py" -c 'from zoo.training.data.builtin import load_fashion_mnist as load
assert len(load("train")[1]) == 60000, "a recipe trains on the whole set: carry .gpu/fashion-mnist-full"' || exit 3
    if compgen -G ".gpu/run-$target.part-*" >/dev/null; then # a run to continue
        mkdir -p "$run" && cat ".gpu/run-$target".part-* | tar -xf - -C "$run"
    fi
    # INT: the recipe stops like Ctrl-C, keeping the checkpoint of its last finished epoch
    timeout --signal=INT "${TRAIN_SECONDS:-420}" "$py" -m zoo.training.recipes.fmnist "$target" --run-dir "$run" \
        --num-workers "${NUM_WORKERS:-14}" --out "$out/weights" "$@" 2>&1 | tr '\r' '\n' | grep -v '^epoch.*it/s' |
        tee "$out/train.txt"
    # what --run-dir needs to continue, in parts under $OUT's 16 MiB a file (the model file is rebuilt)
    tar -cf - -C "$run" --exclude=model.safetensors --exclude=curves.png . | split -b 15m - "$out/run-$target.part-"
    ls -la "$out"
}

sweep() {
    # graph-model variants on the molecule sets: one process per run on the machine's cores, the GPU first
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
    timeout --signal=INT "${SWEEP_SECONDS:-450}" "$py" benchmarks/molecule_sweep.py run --cache .gpu/molecules.pt \
        --jobs "${JOBS:-14}" --device cuda --csv "$out/sweep.csv" ${1:+--variants "$@"} 2>&1 |
        grep -v -i warn | tee "$out/sweep.txt"
}

setup
case "$mode" in
bench) bench ;;
graphs) graphs ;;
train) train "${@:2}" ;;
sweep) sweep "${@:2}" ;;
*)
    echo "unknown mode $mode: bench, graphs, train TARGET or sweep [VARIANT...]" >&2
    exit 2
    ;;
esac
