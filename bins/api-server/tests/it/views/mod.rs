//! The operator views: the paged lists, a reservation's slot accounts, its
//! timeline and a grant's usage.

mod lists;
mod slots;
mod timeline;
