// Shared Boost.Program_options handling for the subcommands: --help text, parse errors turned
// into a message and exit code 2 instead of an exception.
#pragma once

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

namespace kvcomp::cli {

namespace po = boost::program_options;

// Parses argv (argv[0] is the subcommand name). Returns the exit code to stop with (0 after --help,
// 2 after an error), or nothing when the command should run.
inline std::optional<int> parse_options(int argc, char ** argv, po::options_description & desc, const char * usage,
                                        po::variables_map & vm) {
    desc.add_options()("help,h", "show this help");
    try {
        const po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).run();
        // Boost keeps stray words (no option before them) aside silently; refuse them instead.
        const auto stray = po::collect_unrecognized(parsed.options, po::include_positional);
        if (!stray.empty()) throw po::error("unexpected argument '" + stray.front() + "'");
        po::store(parsed, vm);
        po::notify(vm);
    } catch (const po::error & e) {
        std::fprintf(stderr, "kvcomp %s: %s\n(see kvcomp %s --help)\n", argv[0], e.what(), argv[0]);
        return 2;
    }
    if (vm.count("help")) {
        std::cout << usage << "\n\n" << desc << "\n";
        return 0;
    }
    return std::nullopt;
}

}  // namespace kvcomp::cli
