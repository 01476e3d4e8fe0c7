/* fuzz_csv.c - libFuzzer target: `dlbench import` of a CSV file (the label column by index and by name) */
#include <stdint.h>

#include "tests/fuzz/fuzz_common.h"
#include "tui/cmd/commands.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *csv = fuzz_file(0, "f.csv", data, size);
    char out[300];
    snprintf(out, sizeof out, "%s/f.h5", fuzz_dir());
    char label[8];
    snprintf(label, sizeof label, "%d", size ? data[size - 1] % 4 : 0);
    char *argv[] = {"import", (char *)csv, out, "--label", label, NULL};
    dl_cmd_import(dl_command_find("import"), 5, argv);
    char *argv2[] = {"import", (char *)csv,      out,    "--label",
                     "label",  "--val-fraction", "0.25", NULL};
    dl_cmd_import(dl_command_find("import"), 7, argv2);
    unlink(out);
    return 0;
}
