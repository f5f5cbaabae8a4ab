// Subcommands of the kvcomp CLI. Each takes the arguments after its name and returns the process
// exit code (0 ok, 1 runtime failure, 2 usage error); none throws.
#pragma once

namespace kvcomp::cli {

int dispatch(int argc, char ** argv);
int run_info(int argc, char ** argv);
int run_selfcheck(int argc, char ** argv);
int run_generate(int argc, char ** argv);
int run_compare(int argc, char ** argv);
int run_bench(int argc, char ** argv);
int run_eval(int argc, char ** argv);
int run_sweep(int argc, char ** argv);
int run_calibrate(int argc, char ** argv);
int run_ratesearch(int argc, char ** argv);
int run_methods(int argc, char ** argv);

}  // namespace kvcomp::cli
