/* train_main: main() of the `train` executable. The compiler links the object that
 * defines colossalc_program_json, colossalc_kernels and colossalc_nkernels
 * (program.h) with this library; main parses the flags, loads and validates the
 * program, and hands over to the trainer (train_loop.h).
 *
 * Exit status: 0 on success; 1 for any error, after one line "train: ..." on
 * stderr (bad flags, unreadable or invalid files, a failed write) or "train:
 * internal error: ..." when the embedded program itself is malformed.
 */
#include "runtime/program.h"
#include "runtime/train_loop.h"
#include "runtime/train_opts.h"
#include "runtime/train_program.h"

#include <stdio.h>

static int train_fail(const char *prefix, const char *msg)
{
    fflush(stdout);
    fprintf(stderr, "train: %s%s\n", prefix, msg);
    return 1;
}

int main(int argc, char **argv)
{
    static char err[8192];
    TrainOpts opts;
    RtProgram prog;
    Trainer tr;
    if (train_opts_parse(argc, argv, &opts, err, sizeof err) != 0)
        return train_fail("", err);
    if (opts.help) {
        train_opts_help(stdout);
        return 0;
    }
    if (program_load(colossalc_program_json, colossalc_nkernels, &prog, err, sizeof err) != 0)
        return train_fail("internal error: ", err);
    int rc = trainer_init(&tr, &prog, colossalc_kernels, &opts, err, sizeof err) ||
             trainer_run(&tr, err, sizeof err) || trainer_finish(&tr, err, sizeof err);
    trainer_free(&tr);
    program_free(&prog);
    return rc ? train_fail("", err) : 0;
}
