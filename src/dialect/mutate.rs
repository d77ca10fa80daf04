//! Deterministic input mutation for the codecs' never-panic tests (test builds only): a
//! xorshift64* generator and a mutator that flips, drops, inserts, duplicates and truncates bytes.

/// xorshift64*: deterministic, good enough to pick mutations.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

const INTERESTING: &[u8] = b"{}[]\",:0123456789-.eE\\ntrufalsu \n\x00\xff\xc3";

pub(crate) fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            1 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below(8.min(len - i));
                data.drain(i..i + n);
            }
            2 => {
                let i = rng.below(len + 1);
                data.insert(i, INTERESTING[rng.below(INTERESTING.len())]);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below(16.min(len - i)) + 1;
                let copy = data[i..i + n].to_vec();
                let at = rng.below(len + 1);
                data.splice(at..at, copy);
            }
            4 => data.truncate(rng.below(len + 1)),
            _ if len > 0 => {
                let i = rng.below(len);
                data[i] = (rng.next() & 0xff) as u8;
            }
            _ => data.push(b'}'),
        }
    }
    data
}
