use super::*;

fn mean_and_cv(p: &mut ArrivalProcess, n: usize) -> (f64, f64) {
    let v: Vec<f64> = (0..n).map(|_| p.next_gap_secs()).collect();
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    (mean, var.sqrt() / mean)
}

#[test]
fn mean_inter_arrival_is_one_over_rate() {
    let cases = [
        (Arrival::Poisson, 1.0),
        (Arrival::Constant, 0.0),
        (Arrival::Gamma { burstiness: 0.25 }, 2.0),
        (Arrival::Gamma { burstiness: 4.0 }, 0.5),
        (Arrival::Gamma { burstiness: 1.0 }, 1.0),
    ];
    for (arrival, cv_expected) in cases {
        let mut p = ArrivalProcess::new(arrival, 20.0, 9).expect("valid process");
        let (mean, cv) = mean_and_cv(&mut p, 10_000);
        assert!(
            (mean - 0.05).abs() < 0.05 * 0.05,
            "{arrival:?}: mean gap {mean} within 5% of 50 ms"
        );
        assert!(
            (cv - cv_expected).abs() < 0.1,
            "{arrival:?}: CV {cv}, expected {cv_expected}"
        );
    }
}

#[test]
fn same_seed_same_arrivals() {
    let gaps = |seed| {
        let mut p = ArrivalProcess::new(Arrival::Poisson, 5.0, seed).expect("valid");
        (0..100).map(|_| p.next_gap()).collect::<Vec<_>>()
    };
    assert_eq!(gaps(3), gaps(3), "a seed fixes the arrival sequence");
    assert_ne!(gaps(3), gaps(4), "another seed gives another sequence");
}

#[test]
fn infinite_rate_sends_at_once_and_bad_rates_are_refused() {
    let mut p = ArrivalProcess::new(Arrival::Poisson, f64::INFINITY, 0).expect("inf is allowed");
    assert_eq!(p.next_gap(), Duration::ZERO, "rate inf: no gaps");
    for rate in [0.0, -1.0, f64::NAN] {
        assert!(
            ArrivalProcess::new(Arrival::Poisson, rate, 0).is_err(),
            "rate {rate} is refused"
        );
    }
    assert!(
        ArrivalProcess::new(Arrival::Gamma { burstiness: 0.0 }, 1.0, 0).is_err(),
        "burstiness 0 is refused"
    );
}

#[test]
fn a_class_header_goes_on_its_requests_only() {
    let mut spec = LoadSpec::new("http://127.0.0.1:1");
    spec.workload = "a:1:prompt=3:output=2:header=x-tenant-id=acme,b:1:prompt=4:output=2"
        .parse()
        .expect("a mix with a header parses");
    let plans: Vec<PlannedRequest> = (0..200).map(|i| plan(&spec, i)).collect();
    assert!(
        plans.iter().any(|p| p.class == 0) && plans.iter().any(|p| p.class == 1),
        "200 draws hit both classes"
    );
    for p in &plans {
        let header = p.header.as_ref().map(|(n, v)| (n.as_str(), v.as_bytes()));
        let expected = (p.class == 0).then_some(("x-tenant-id", &b"acme"[..]));
        assert_eq!(
            header, expected,
            "request {} of class {} carries its class's header only",
            p.index, p.class
        );
    }
}
