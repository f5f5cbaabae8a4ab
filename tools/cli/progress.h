// A one-line progress bar on stderr, drawn only when stderr is a terminal (so logs and pipes stay
// clean). Not thread-safe; one per loop.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace kvcomp::cli {

class progress_bar {
public:
    explicit progress_bar(long total) : total_(total), on_(isatty(fileno(stderr)) != 0) {}
    ~progress_bar() { done(); }

    // Shows `current` of total with a label (e.g. the grid point being run).
    void update(long current, const std::string & label) {
        if (!on_ || total_ <= 0) return;
        const int width = 30, filled = int(width * current / total_);
        std::fprintf(stderr, "\r[%s%s] %ld/%ld %-40.40s", std::string(size_t(filled), '#').c_str(),
                     std::string(size_t(width - filled), ' ').c_str(), current, total_, label.c_str());
        std::fflush(stderr);
        drawn_ = true;
    }
    void done() {
        if (drawn_) std::fprintf(stderr, "\r%80s\r", "");
        drawn_ = false;
    }

private:
    long total_;
    bool on_;
    bool drawn_ = false;
};

}  // namespace kvcomp::cli
