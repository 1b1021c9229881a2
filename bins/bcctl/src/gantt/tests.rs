use super::*;
use serde_json::json;

#[test]
fn bars_fill_the_columns_their_terms_meet() {
    let grid = Grid {
        from: 0,
        span: 100,
        n: 10,
    };
    let bar = |s, e| Bar {
        label: Label::default(),
        term: Some((s, e)),
        served_until: None,
    };
    assert_eq!(bar(15, 31).cells(&grid), (EDGE, " ███      ".into(), EDGE));
    assert_eq!(bar(-5, 105).cells(&grid), ('<', "██████████".into(), '>'));
    assert_eq!(bar(-50, -10).cells(&grid), ('<', "          ".into(), EDGE));
    let ended = Bar {
        served_until: Some(50),
        ..bar(0, 100)
    };
    assert_eq!(ended.cells(&grid), (EDGE, "█████░░░░░".into(), EDGE));
}

#[test]
fn slots_rows_scale_to_the_total_and_mark_what_is_above() {
    let grid = Grid {
        from: 0,
        span: 40,
        n: 4,
    };
    let steps = [
        Step {
            from: 0,
            to: 10,
            slots: 0,
        },
        Step {
            from: 10,
            to: 20,
            slots: 1,
        },
        Step {
            from: 20,
            to: 25,
            slots: 4,
        },
        Step {
            from: 25,
            to: 30,
            slots: 5,
        },
    ];
    assert_eq!(slots_cells(&grid, &steps, Some(4)), "·▂! ");
    assert_eq!(slots_cells(&grid, &steps, None), "·▂█ ");
}

#[test]
fn garbage_does_not_panic() {
    for v in [
        json!(null),
        json!([]),
        json!({"from": "x", "grants": 3}),
        json!({"to": -1}),
    ] {
        for width in 0..30 {
            let text = render(&v, width, false);
            assert!(text.lines().all(|l| l.chars().count() <= width), "{text}");
        }
    }
}
