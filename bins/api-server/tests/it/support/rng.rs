//! A tiny deterministic PRNG for the randomized tests.

/// xorshift64*: a fixed seed, or one per run ([`Rng::from_env`]) printed so
/// a failure can be replayed with `TEST_SEED`.
pub struct Rng(u64);

impl Rng {
    /// Seeded with `seed` (0 counts as 1: xorshift never leaves 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Seeded from `TEST_SEED` or the OS clock; prints the seed.
    pub fn from_env(name: &str) -> Rng {
        let seed = std::env::var("TEST_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{name}: TEST_SEED={seed}");
        Rng::new(seed)
    }

    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = u64::try_from(hi - lo + 1).expect("range");
        lo + i64::try_from(self.next() % span).expect("fits")
    }

    /// True with probability `p` percent.
    pub fn chance(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }

    /// A random element index of a non-empty slice length.
    pub fn pick(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).expect("fits")
    }
}
