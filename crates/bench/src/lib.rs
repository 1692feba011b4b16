//! cads-bench: YCSB, BG and TPC-C workloads, drivers, validation and reports. Not built yet; the crate exists so that the dependency direction of `DESIGN.md` §2 holds from the start.
