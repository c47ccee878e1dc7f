# Sanitizer run-time settings for tests/run_tests.sh when SAN is set (`make test SAN=address,undefined`).
# Sourced, not run. san_options DIR exports ASAN_OPTIONS, LSAN_OPTIONS and UBSAN_OPTIONS with the
# reports going to DIR; the runner passes them to every rank with `mpirun -x`.
#
# Reports go to files, not to stderr: log_path=DIR/<tool> makes every instrumented process write
# DIR/<tool>.<exe>.<pid>. The runner gives each test its own DIR, and any file in it fails the test
# (the reports are appended to the test's log and printed). That also catches a finding in a
# process whose failure a test expects (a bad-input test wants a non-zero exit and a message, and
# would otherwise pass on the sanitizer's exit code) or whose output a script swallows.
# Each process also stops at its first finding (halt_on_error; -fno-sanitize-recover=all makes
# every UBSan check fatal) with a non-zero exit code, so the run fails even without the file.
san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

san_options() {  # DIR (absolute)
  local dir=$1 a
  # ASan. detect_leaks stays on: LeakSanitizer checks our code at every exit; lsan.supp lists the
  # third-party libraries whose own allocations it must not count.
  # quarantine_size_mb=64 (default 256): freed blocks stay poisoned per process to catch a use
  # after free; up to 8 ranks (plus whatever else runs) share a 24 GiB test machine, and the tiny
  # test models free far less than 64 MiB per step, so the window still spans several steps.
  # check_initialization_order + strict_init_order: static-initialisation order bugs.
  a=halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1
  a+=:quarantine_size_mb=64:log_path=$dir/asan:log_exe_name=1
  # intercept_tls_get_addr=0: the __tls_get_addr hook of these runtimes (clang 14, GCC 12; fixed in
  # LLVM 17 and GCC 14) takes a dynamic TLS block that malloc placed 16 bytes into a page for a
  # glibc 2.19 block header and records the two words before it as a TLS range to scan. glibc 2.25+
  # has no such header: the leak checker then reads from a garbage address and dies ("Tracer caught
  # signal 11", no leak reported). OpenMPI's dlopen'd components use dynamic TLS, so whether a
  # process dies depends on where malloc happened to put such a block: the checkpoint fuzzer once
  # failed in CI this way (addr=0xc58; ASan's verbosity=2 showed "glibc >=2.19 suspected;
  # tls={0xc54 ...}" in the same target). Without the hook the blocks are still found: they are
  # ordinary heap blocks, reachable from glibc's per-thread vector.
  a+=:intercept_tls_get_addr=0
  export ASAN_OPTIONS=$a
  # The leak checker reads its own variable. print_suppressions=0: otherwise every process that
  # had a suppressed third-party leak writes the "Suppressions used" table into a report file,
  # which the runner would count as a finding.
  export LSAN_OPTIONS=suppressions=$san_dir/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$san_dir/ubsan.supp:log_path=$dir/ubsan:log_exe_name=1
}

# The one report that is not a finding: HDF5 faulting inside the checkpoint check's child process
# (src/checkpoint/checkpoint_check_process.cpp), which exists to contain exactly that. A random bit
# flip in a checkpoint's global heap (no checksum) can make libhdf5 memcpy gigabytes out of a 4 KiB
# block; the child dies, the parent reports the file as corrupted (the test checks that). A report
# is "contained" only when (1) the process is that child (its stack holds checkpoint_check_main,
# the exec'd child, or check_checkpoint_structure_isolated, a forked one) and (2) the first frame
# outside the sanitizer runtime and libc is in libhdf5: a fault in our own code there, or in HDF5
# anywhere else, still fails the test.
san_contained_hdf5_fault() {  # REPORT
  grep -q 'checkpoint_check_main\|check_checkpoint_structure_isolated' "$1" || return 1
  awk '/^ *#[0-9]+ / && !/libsanitizer|libasan|libubsan|__interceptor_|sanitizer_common|libc\.so/ {print; exit}' "$1" |
    grep -q 'libhdf5'
}
