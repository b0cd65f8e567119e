// Runs an example program as a user does (posix_spawn, no shell: every argument arrives exactly
// as given) and collects its exit status and output: the command-line tests of
// tests/examples/*_cli.cpp.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace cli_test {

struct Run {
    int status = -1;  ///< exit status, or -1 if the program did not exit normally
    std::string out;  ///< what it printed on stdout
    std::string err;  ///< ... and on stderr
};

inline std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Runs `program` with `args`; stdout and stderr go through temporary files.
inline Run run_program(const std::string& program, const std::vector<std::string>& args) {
    namespace fs = std::filesystem;
    static int counter = 0;
    const fs::path out_path = fs::temp_directory_path() / ("diffattn_cli_" + std::to_string(::getpid()) + "_" +
                                                           std::to_string(counter++));
    const std::string out_file = out_path.string() + ".out", err_file = out_path.string() + ".err";
    std::vector<std::string> storage = {program};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(spawned == 0);
    int wait_status = 0;
    REQUIRE(::waitpid(pid, &wait_status, 0) == pid);
    Run run;
    run.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
    run.out = read_all(out_file);
    run.err = read_all(err_file);
    fs::remove(out_file);
    fs::remove(err_file);
    return run;
}

/// Checks that `run` failed with status 2 and a message holding every fragment, and nothing else.
inline void check_refused(const Run& run, std::initializer_list<const char*> fragments) {
    INFO("stdout: " << run.out << "\nstderr: " << run.err);
    CHECK(run.status == 2);
    CHECK(run.err.find("unexpected error") == std::string::npos);
    for (const char* fragment : fragments) {
        INFO("expected fragment: " << fragment);
        CHECK(run.err.find(fragment) != std::string::npos);
    }
}

}  // namespace cli_test
