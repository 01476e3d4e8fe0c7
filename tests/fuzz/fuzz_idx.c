/* fuzz_idx.c - libFuzzer target: the IDX reader (images and labels files, as dlbench import and dl.data read them)
 *
 * The first byte of the input says where to split it into an images file
 * and a labels file (at that many sixteenths of the rest).
 */
#include <stdint.h>

#include "engine/data/data.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t rest = size - 1, cut = rest * (data[0] & 15) / 16;
    const char *images = fuzz_file(0, "f-images-idx3-ubyte", data + 1, cut);
    const char *labels = fuzz_file(1, "f-labels-idx1-ubyte", data + 1 + cut, rest - cut);
    dl_dataset d;
    memset(&d, 0, sizeof d);
    if (dl_dataset_load_idx(&d, images, labels) == 0)
        dl_dataset_done(&d);
    return 0;
}
