#!/usr/bin/env bash
# t_models.sh - the example models of today's families, shortened, end to end
# through $DLBENCH: scripts/resnet_fmnist.lua on 512 Fashion-MNIST samples for
# one epoch (finished, a val_acc in the summary, the Residual blocks and the
# global average pooling in the resolved model).
. "$(dirname "$0")/lib.sh"
test_init

require_subcommand t_models run "(not built or not dispatched)"

run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }

if [ -s data/fashion-mnist.h5 ]; then
    if run resnet_fmnist 0 run scripts/resnet_fmnist.lua epochs=1 limit=512 val_limit=256 \
        --out "$OUT/runs"; then
        d=$(run_dir_of resnet_fmnist)
        st=$(json_field "$d/summary.json" status)
        if [ "$st" != finished ]; then
            fail resnet_fmnist_run "summary status '$st'"
        elif ! grep -q '"val_acc"' "$d/summary.json"; then
            fail resnet_fmnist_run "no val_acc in summary.json"
        elif ! grep -qF 'Sequential(Conv2d(16, 32, 1, stride=2, pad=0), BatchNorm(32))' "$d/config.json" ||
            ! grep -q 'AdaptiveAvgPool2d(1)' "$d/config.json"; then
            fail resnet_fmnist_run "config.json lacks the projection Residual or the pooling"
        else
            pass resnet_fmnist_run
        fi
    fi
else
    skip resnet_fmnist "no data/fashion-mnist.h5 (scripts/prepare-data.sh writes it)"
fi
exit 0
