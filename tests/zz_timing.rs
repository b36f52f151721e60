#![cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore]
fn timing() {
    use shardlab::passes::*;
    use std::time::Instant;
    let program = shardlab::models::Model::Gpt.build(&shardlab::models::ModelConfig { layers: 96, ..shardlab::models::Model::Gpt.default_config() }).unwrap();
    let mesh = std::sync::Arc::new(shardlab::plan::parse_mesh_spec("2x4:dp,mp").unwrap());
    let mut shards = vec!["x=dp,-,-".to_string()];
    shards.extend(shardlab::models::scenarios::megatron_shards(96, "mp"));
    let annotations = shards.iter().map(|s| shardlab::plan::parse_shard_spec(s, &program, &mesh).unwrap()).collect();
    let plan = shardlab::plan::Plan { mesh: Some(mesh), program, annotations };
    for _ in 0..2 {
        let t = Instant::now();
        let c = complete(&plan).unwrap();
        let t1 = t.elapsed();
        let b = backward::append_backward(&plan.program).unwrap();
        let t2 = t.elapsed();
        let bd = complete_backward::complete_backward(&b, &c);
        let t3 = t.elapsed();
        let mut full = bd.clone();
        optimizer::append_optimizer(&mut full, &b.param_grads, &Default::default()).unwrap();
        let t4 = t.elapsed();
        let grads: Vec<_> = b.param_grads.iter().map(|&(_, g)| g).collect();
        let parts = partition::partition(&full, &b.forward_of, &grads, Default::default()).unwrap();
        let t5 = t.elapsed();
        let l = ledger::ledger(&parts);
        let t6 = t.elapsed();
        drop((parts, l, full, bd, b, c));
        let t7 = t.elapsed();
        eprintln!("complete {t1:?} backward {:?} cbw {:?} opt {:?} partition {:?} ledger {:?} drop {:?}", t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6);
    }
}
