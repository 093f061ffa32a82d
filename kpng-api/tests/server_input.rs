//! The body of the fuzz target `server_input` (`fuzz/`) over inputs drawn
//! here, as `cargo test` runs it where cargo-fuzz is not installed: a
//! few written by hand, then 3,000 drawn from a fixed seed.

#[path = "support/server_input.rs"]
mod server_input;

/// xorshift64*: the same inputs every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn hand_written_inputs() {
    let watch = {
        // WatchRequest { node: "node-1" } as one message.
        let mut m = vec![2, 0, 0, 1, 0, 8];
        m.extend(b"\x0a\x06node-1");
        m
    };
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        // Frames after the preface: SETTINGS of 5 bytes, DATA on stream 0.
        [&[0_u8][..], &[0, 0, 5, 4, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5]].concat(),
        [&[0_u8][..], &[0, 0, 1, 0, 0, 0, 0, 0, 0, 9]].concat(),
        // A watch, whole; a watch whose request stream never ends.
        watch.clone(),
        {
            let mut w = watch.clone();
            w[3] = 0;
            w
        },
        // Each method, each codec, a message flagged compressed.
        vec![2, 1, 1, 1, 1, 4, 1, 2, 3, 4],
        vec![2, 2, 2, 1, 0, 3, 0x0a, 0x01, b'x'],
        vec![2, 3, 3, 1, 1, 2, 0xff, 0xff],
        vec![2, 4, 0, 1, 0, 0],
        vec![1, 5, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff],
        // A length prefix declaring 4 GiB.
        vec![1, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff],
    ];
    let mut watches = 0;
    for case in &cases {
        let (answered, full_views) = server_input::run(case);
        // Every client past the preface is answered (SETTINGS at least).
        assert!(answered >= 9, "{case:?}: {answered} bytes");
        watches += full_views;
    }
    // The whole watch streamed its view (one whose request never ends is
    // answered only once it does).
    assert!(watches >= 1, "{watches} full views");
}

#[test]
fn drawn_inputs() {
    let mut draw = Draw(0x6b70_6e67_2d68_6f73);
    for _ in 0..3000 {
        let len = (draw.next() % 200) as usize;
        let mut input: Vec<u8> = (0..len).map(|_| draw.next() as u8).collect();
        if let Some(first) = input.first_mut() {
            // Requests more often than raw frames.
            *first = (draw.next() % 3) as u8;
        }
        let _ = server_input::run(&input);
    }
}
