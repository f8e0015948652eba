import ray
from raylog import Admin, Producer
from tests.integration.conftest import replica_handle, wait_for

def test_permanent_kill(ray_cluster, topic_name):
    admin = Admin(cluster=ray_cluster.raylog)
    admin.create_topic(topic_name, partitions=1)
    with Producer() as p:
        p.send(topic_name, b"a").result(30)
    actor = replica_handle(admin, topic_name, 0)
    ray.kill(actor, no_restart=True)
    with Producer(delivery_timeout_ms=30000) as p:
        print(p.send(topic_name, b"b").result(40))
