/* fuzz_override.c - libFuzzer target: k=v overrides (one a line of the input) applied to a script's dl.hparams */
#include <stdint.h>

#include "engine/base/error.h"
#include "scripting/script.h"
#include "tests/fuzz/fuzz_common.h"

static const char script[] =
    "local dl = require \"dlbench\"\n"
    "local nn, optim = dl.nn, dl.optim\n"
    "local hp = dl.hparams { lr = 0.1, hidden = 8, act = \"relu\", bias = true, n = 64 }\n"
    "return dl.experiment {\n"
    "  data = dl.data.synthetic { n = hp.n, val = 0 },\n"
    "  model = nn.Sequential { nn.Linear(2, hp.hidden), nn.ReLU(), nn.Linear(hp.hidden, 2) },\n"
    "  optimizer = optim.SGD { lr = hp.lr }, batch = 8, epochs = 1,\n"
    "}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *path;
    if (!path)
        path = fuzz_file(0, "f.lua", script, sizeof script - 1);
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *ovs[8];
    int n = 0;
    for (char *line = text, *next; line && n < 8; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        ovs[n++] = line;
    }
    dl_script_options o;
    memset(&o, 0, sizeof o);
    o.path = path;
    o.overrides = ovs;
    o.noverrides = n;
    o.instruction_limit = 2000000;
    dl_script *s = NULL;
    if (dl_script_load(&s, &o) == 0)
        dl_script_destroy(s);
    free(text);
    return 0;
}
