// Linked into the sanitizer build's executables only (Makefile, SAN=...): a dlclose that keeps
// every shared object loaded. OpenMPI 4.1 dlopens its MCA components (mca_*.so) and PMIx its
// plugins, and dlcloses them in MPI_Finalize; LeakSanitizer reports at exit, when their address
// ranges no longer belong to any module, so the allocation stacks of their (deliberate,
// once-per-process) leaks read "<unknown module>" and no suppression can name them. OpenMPI 5
// has an MCA parameter for exactly this (mca_base_component_disable_dlclose); 4.1 does not.
// Never unloading is harmless here: each process exits right after MPI_Finalize.
// The executable exports it (-Wl,--export-dynamic-symbol=dlclose), so the libraries' calls bind
// to it ahead of libc's.
extern "C" int dlclose(void*) { return 0; }
