// kvcomp command line: dispatches to subcommands (kvcomp info, ...).
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

int main(int argc, char ** argv) {
    return kvcomp::cli::dispatch(argc, argv);
}
