use super::*;

const MIX: &str = "chat:0.9:prompt=uniform:200-600:output=uniform:64-256,\
document:0.1:prompt=uniform:6000-10000:output=fixed:128";

#[test]
fn parses_distributions() {
    assert_eq!("fixed:7".parse::<Dist>(), Ok(Dist::Fixed(7)), "fixed:N");
    assert_eq!(
        "7".parse::<Dist>(),
        Ok(Dist::Fixed(7)),
        "a bare number is fixed"
    );
    assert_eq!(
        "uniform:3-9".parse::<Dist>(),
        Ok(Dist::Uniform { lo: 3, hi: 9 }),
        "uniform:A-B"
    );
    assert_eq!(
        "lognormal:100,0.5,300".parse::<Dist>(),
        Ok(Dist::LogNormal {
            median: 100.0,
            sigma: 0.5,
            max: 300
        }),
        "lognormal with an explicit MAX"
    );
    assert_eq!(
        "lognormal:100,1".parse::<Dist>(),
        Ok(Dist::LogNormal {
            median: 100.0,
            sigma: 1.0,
            max: 2009
        }),
        "default MAX is ceil(100 e^3)"
    );
}

#[test]
fn parses_the_documented_mix() {
    let w: Workload = MIX.parse().expect("the documented example parses");
    let names = w.class_names();
    assert_eq!(names, ["chat", "document"], "two classes in order");
    let doc = &w.classes()[1];
    assert_eq!(doc.weight, 0.1, "document weight");
    assert_eq!(
        doc.prompt,
        Dist::Uniform {
            lo: 6000,
            hi: 10000
        },
        "document prompt"
    );
    assert_eq!(doc.output, Dist::Fixed(128), "document output");
    let again: Workload = w.to_string().parse().expect("Display output parses");
    assert_eq!(again, w, "Display round-trips");
}

#[test]
fn lognormal_commas_do_not_split_classes() {
    let w: Workload =
        "a:1:prompt=lognormal:500,1.0:output=fixed:10,b:2:output=lognormal:50,0.5,80:prompt=3"
            .parse()
            .expect("mix with lognormal parses");
    assert_eq!(
        w.class_names(),
        ["a", "b"],
        "commas inside lognormal stay in the class"
    );
    assert_eq!(
        w.classes()[1].output,
        Dist::LogNormal {
            median: 50.0,
            sigma: 0.5,
            max: 80
        },
        "keys may come in any order"
    );
    let semi: Workload = "a:1:prompt=1:output=2;b:1:prompt=3:output=4"
        .parse()
        .expect("';' separates");
    assert_eq!(semi.class_names(), ["a", "b"], "';' separates classes");
}

#[test]
fn a_class_may_carry_one_header() {
    let w: Workload =
        "a:1:prompt=10:output=5:header=X-Tenant-Id=acme,b:3:header=x-tenant-id=b.2:prompt=1:output=1;c:1:prompt=1:output=1"
            .parse()
            .expect("classes with headers parse");
    let headers: Vec<Option<(&str, &str)>> = w
        .classes()
        .iter()
        .map(|c| {
            c.header
                .as_ref()
                .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("?")))
        })
        .collect();
    assert_eq!(
        headers,
        [
            Some(("x-tenant-id", "acme")),
            Some(("x-tenant-id", "b.2")),
            None
        ],
        "names are lower-cased, values kept; the key may come anywhere; a class without one has none"
    );
    assert_eq!(
        w.classes()[0].output,
        Dist::Fixed(5),
        "the header does not swallow the output before it"
    );
    let again: Workload = w.to_string().parse().expect("Display output parses");
    assert_eq!(again, w, "Display round-trips the headers");
    for (text, reason) in [
        ("a:1:prompt=1:output=1:header=x-t", "NAME=VALUE"),
        (
            "a:1:prompt=1:output=1:header=bad name=v",
            "not a header name",
        ),
        ("a:1:prompt=1:output=1:header=x-t=", "visible ASCII"),
        ("a:1:prompt=1:output=1:header=x-t=a b", "visible ASCII"),
        ("a:1:prompt=1:output=1:header=x-t=a:b", "visible ASCII"),
        ("a:1:prompt=1:output=1:header=x-t=a:header=x-u=b", "twice"),
    ] {
        let err = text.parse::<Workload>().expect_err(text);
        assert!(
            err.reason.contains(reason),
            "{text}: reason {:?} should say {reason:?}",
            err.reason
        );
    }
}

#[test]
fn errors_name_the_bad_part() {
    let cases = [
        (
            "chat:0.9:prompt=uniform:600-200:output=fixed:1",
            "uniform:600-200",
            "exceeds",
        ),
        ("chat:x:prompt=fixed:1:output=fixed:1", "chat:x:", "weight"),
        (
            "chat:1:prompt=fixed:1",
            "chat:1:prompt=fixed:1",
            "missing output",
        ),
        (
            "chat:1:prompt=zipf:3:output=fixed:1",
            "zipf:3",
            "unknown distribution",
        ),
        (
            "chat:1:prompt=fixed:0:output=fixed:1",
            "fixed:0",
            "at least 1",
        ),
        (
            "chat:1:prompt=1:output=1:colour=1",
            "chat:1:prompt=1:output=1:colour=1",
            "unknown key",
        ),
        (
            "chat:1:prompt=lognormal:100:output=1",
            "lognormal:100",
            "MEDIAN,SIGMA",
        ),
        (
            "a:1:prompt=1:output=1,a:1:prompt=2:output=2",
            "a:1:",
            "twice",
        ),
        ("all:1:prompt=1:output=1", "all:1", "reserved"),
        ("chat:0:prompt=1:output=1", "chat:0", "weight"),
        ("chat", "chat", "NAME:WEIGHT"),
    ];
    for (text, part, reason) in cases {
        let err = text.parse::<Workload>().expect_err(text);
        assert!(
            err.part.contains(part),
            "{text}: error part {:?} should name {part:?}",
            err.part
        );
        assert!(
            err.reason.contains(reason),
            "{text}: reason {:?} should say {reason:?}",
            err.reason
        );
        assert!(
            err.to_string().contains(part),
            "{text}: message {err} names the part"
        );
    }
}

#[test]
fn seeded_sampling_is_reproducible() {
    let w: Workload = MIX.parse().expect("parses");
    let a: Vec<Sample> = (0..200).map(|i| w.sample_request(42, i)).collect();
    let b: Vec<Sample> = (0..200)
        .rev()
        .map(|i| w.sample_request(42, i))
        .rev()
        .collect();
    assert_eq!(
        a, b,
        "a request's draw depends on (seed, index) only, not on order"
    );
    let c: Vec<Sample> = (0..200).map(|i| w.sample_request(43, i)).collect();
    assert_ne!(a, c, "another seed gives another workload");
    for s in &a {
        let class = &w.classes()[s.class];
        let ok = match (class.prompt, class.output) {
            (Dist::Uniform { lo, hi }, Dist::Uniform { lo: ol, hi: oh }) => {
                (lo..=hi).contains(&s.prompt_tokens) && (ol..=oh).contains(&s.output_tokens)
            }
            (Dist::Uniform { lo, hi }, Dist::Fixed(n)) => {
                (lo..=hi).contains(&s.prompt_tokens) && s.output_tokens == n
            }
            _ => false,
        };
        assert!(ok, "sample {s:?} lies within its class's ranges");
    }
}

#[test]
fn class_weights_are_respected() {
    let w: Workload = MIX.parse().expect("parses");
    let docs = (0..10_000)
        .filter(|&i| w.sample_request(7, i).class == 1)
        .count();
    assert!(
        (800..1200).contains(&docs),
        "about 10% documents, got {docs} of 10000"
    );
}

#[test]
fn lognormal_is_clamped_and_centred() {
    let d = Dist::LogNormal {
        median: 100.0,
        sigma: 1.5,
        max: 400,
    };
    let mut rng = request_rng(1, 1);
    let mut v: Vec<u32> = (0..10_000).map(|_| d.sample(&mut rng)).collect();
    assert!(
        v.iter().all(|&x| (1..=400).contains(&x)),
        "every sample within 1..=MAX"
    );
    v.sort_unstable();
    let median = v[v.len() / 2];
    assert!(
        (90..=110).contains(&median),
        "median near 100, got {median}"
    );
}
