//! Generator state: saved, drawn from, restored, drawn again: the same
//! numbers; the bytes round-trip and corrupt bytes are an error.

use tensorguard::{default_generator, DType, Device, Generator, GeneratorState, Tensor};

const CPU: Device = Device::Cpu;

fn draws(g: &Generator) -> (Vec<f32>, Vec<f64>, Vec<i64>) {
    (
        Tensor::rand_with([7], DType::F32, &CPU, g)
            .unwrap()
            .to_vec()
            .unwrap(),
        Tensor::randn_with([5], DType::F64, &CPU, g)
            .unwrap()
            .to_vec()
            .unwrap(),
        Tensor::randint_with(0, 1000, [9], &CPU, g)
            .unwrap()
            .to_vec()
            .unwrap(),
    )
}

#[test]
fn restoring_a_state_replays_the_stream() {
    let g = Generator::new(42);
    let _ = draws(&g); // not at the start of the stream
    let saved = g.state();
    let first = draws(&g);
    assert_ne!(g.state(), saved);
    g.set_state(&saved);
    assert_eq!(g.state(), saved);
    assert_eq!(draws(&g), first);
    // through bytes, into another generator
    let other = Generator::new(7);
    other.set_state(&GeneratorState::from_bytes(&saved.to_bytes()).unwrap());
    assert_eq!(draws(&other), first);
}

#[test]
fn the_default_generator_can_be_saved_and_restored() {
    // the only test of this binary that uses the default generator
    let g = default_generator();
    let saved = g.state().to_bytes();
    let a = Tensor::rand([16], DType::F32, &CPU)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    g.set_state(&GeneratorState::from_bytes(&saved).unwrap());
    let b = Tensor::rand([16], DType::F32, &CPU)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn corrupt_bytes_are_an_error() {
    let good = Generator::new(1).state().to_bytes();
    assert_eq!(good.len(), 61);
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "61 bytes"),
        (good[..60].to_vec(), "61 bytes"),
        ([good.as_slice(), &[0]].concat(), "61 bytes"),
    ];
    let mut tag = good.clone();
    tag[0] ^= 0xff;
    cases.push((tag, "tag"));
    let mut version = good.clone();
    version[4] = 9;
    cases.push((version, "version 9"));
    let mut pos = good.clone();
    pos[60] = 0xff;
    cases.push((pos, "word position"));
    for (bytes, needle) in cases {
        let msg = GeneratorState::from_bytes(&bytes).unwrap_err().to_string();
        assert!(
            msg.contains("from_bytes") && msg.contains(needle),
            "{needle}: {msg}"
        );
    }
}
