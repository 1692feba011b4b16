//! cads: the framework (write policies, write-back, TARDIS, Gemini, CPR, SAS). Not built yet; the crate exists so that the dependency direction of `DESIGN.md` §2 holds from the start.
