# tests/gpu/compare.awk - dlbench against PyTorch per model from the RESULT lines of bench/gpu_*: the ratio table and one ROW|name|state|detail line per model for the summary of tests/gpu/run.sh

function field(key,    i) {
    for (i = 5; i <= NF; i++)
        if (index($i, key "=") == 1)
            return substr($i, length(key) + 2)
    return ""
}
$2 == "gpu_gemm" && $3 == "bf16" { if ($5 + 0 > peak) { peak = $5 + 0; pshape = $4 }; next }
$2 == "gpu_torch" && $3 == "matmul" {
    v = field("tflops") + 0
    if (v > tpeak) { tpeak = v; tshape = field("shape") }
    next
}
$2 == "gpu_train" || $2 == "gpu_torch" {
    k = $3 " " $4
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    s = ($2 == "gpu_train") ? "dl" : "pt"
    sps[s, k] = field("samples_per_s") + 0
    tf[s, k] = field("tflops") + 0
    batch[k] = field("batch")
}
END {
    if (n == 0) {
        print "nothing to compare: no gpu_train or gpu_torch results (see their SKIP or FAIL lines above)"
        print "ROW|comparison|SKIP|no gpu_train or gpu_torch results"
        exit
    }
    printf "%-9s %-4s %5s %11s %11s %7s %7s %8s %8s %5s\n", "model", "prec", "batch", "dlbench/s",
        "pytorch/s", "ratio", "target", "dl TF/s", "pt TF/s", "met"
    for (i = 1; i <= n; i++) {
        k = order[i]
        split(k, mp, " ")
        m = mp[1]
        have = ((("dl", k) in sps) && (("pt", k) in sps) && sps["pt", k] > 0)
        ratio = have ? sps["dl", k] / sps["pt", k] : 0
        large = (batch[k] + 0 > 128)
        tg = large ? "-" : ">=1.20x"
        state = "-"
        if (!large && have) state = (ratio >= 1.2) ? "yes" : "NO"
        printf "%-9s %-4s %5s %11s %11s %7s %7s %8s %8s %5s\n", m, mp[2], batch[k],
            (("dl", k) in sps) ? sprintf("%.0f", sps["dl", k]) : "-",
            (("pt", k) in sps) ? sprintf("%.0f", sps["pt", k]) : "-",
            have ? sprintf("%.2fx", ratio) : "-", tg,
            (("dl", k) in tf) ? sprintf("%.2f", tf["dl", k]) : "-",
            (("pt", k) in tf) ? sprintf("%.2f", tf["pt", k]) : "-", state
        name = "vs torch " m " " mp[2]
        if (large) {
            if (!(("dl", k) in tf))
                print "ROW|" name "|SKIP|no dlbench figure (see gpu_train)"
            else if (peak <= 0)
                print "ROW|" name "|SKIP|" sprintf("%.1f TFLOP/s; no cuBLAS bf16 peak (gpu_gemm) to compare with", tf["dl", k])
            else {
                pct = 100 * tf["dl", k] / peak
                print "ROW|" name "|" (pct >= 60 ? "met" : "MISS") "|" \
                    sprintf("%.1f TFLOP/s = %.0f%% of cuBLAS bf16 %.1f (target >= 60%%)%s", tf["dl", k], pct, peak,
                            have ? sprintf("; %.2fx torch", ratio) : "")
            }
        } else if (!(("dl", k) in sps)) {
            print "ROW|" name "|SKIP|no dlbench figure (see gpu_train)"
        } else if (!have) {
            print "ROW|" name "|SKIP|no PyTorch figure (see gpu_torch)"
        } else {
            print "ROW|" name "|" (ratio >= 1.2 ? "met" : "MISS") "|" \
                sprintf("%.2fx PyTorch eager samples/s (target >= 1.2x)", ratio)
        }
    }
    print "  (ratio = dlbench / PyTorch eager samples/s, best of the timed windows each; TF/s counts"
    print "   matrix-product FLOPs: forward, weight and input gradients, about 6 x params per sample)"
    for (i = 1; i <= n; i++) {
        k = order[i]
        if (batch[k] + 0 <= 128 || !(("dl", k) in tf)) continue
        split(k, mp, " ")
        if (peak > 0)
            printf "large MLP %s: dlbench %.1f TFLOP/s = %.0f%% of the cuBLAS bf16 peak %.1f TFLOP/s (gpu_gemm %s); target >= 60%%: %s\n",
                mp[1], tf["dl", k], 100 * tf["dl", k] / peak, peak, pshape, (100 * tf["dl", k] / peak >= 60 ? "yes" : "NO")
        else
            printf "large MLP %s: dlbench %.1f TFLOP/s; no cuBLAS bf16 peak from gpu_gemm in this run\n", mp[1], tf["dl", k]
        if (("pt", k) in tf) {
            if (peak > 0)
                printf "  PyTorch: %.1f TFLOP/s = %.0f%% of the cuBLAS peak", tf["pt", k], 100 * tf["pt", k] / peak
            else
                printf "  PyTorch: %.1f TFLOP/s", tf["pt", k]
            if (tpeak > 0)
                printf "; torch.matmul bf16 peak %.1f TFLOP/s (%s): dlbench %.0f%%, PyTorch %.0f%% of it",
                    tpeak, tshape, 100 * tf["dl", k] / tpeak, 100 * tf["pt", k] / tpeak
            printf "\n"
        }
    }
}