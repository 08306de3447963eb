"""A small, coherent AWS estate seeded into moto's server, for the estate source's tests.

One region holds two RDS instances (``prod-db-03``, MySQL, stopped; ``orders-pg``),
the ``orders-redis`` replication group, an internet-facing ALB (``api-alb``) with
HTTPS:443 forwarding to a target group of two instances (``web-1`` running,
``web-2`` stopped) and HTTP:80 redirecting, a security group open to the world
on 22 plus one that admits the ALB's group, an Elastic IP on ``web-1``, a NAT
gateway; Route 53 holds ``example.com`` with ``api.example.com`` aliased to the
ALB and ``www`` a CNAME to it; S3 a public bucket (by policy), a public one (by
ACL) and a private one in another region.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3

from tests.fakes.clouds import start_moto

REGION = "us-west-2"
"""The estate's region (other moto tests in the process use others)."""
BUCKET_REGION = "eu-west-1"
"""Where the private bucket lives (a bucket's own region must show on its resource)."""


@dataclass(frozen=True)
class AwsEstateIds:
    """What the seeding created, for assertions."""

    vpc: str
    ssh_group: str
    web_group: str
    running: str
    stopped: str
    eip: str
    eip_allocation: str
    nat: str
    nat_ip: str
    alb_arn: str
    alb_dns: str
    public_bucket: str
    acl_bucket: str
    private_bucket: str


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on 127.0.0.1 (ephemeral port), yielding its endpoint."""
    server = start_moto()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str, service: str, region: str = REGION) -> Any:
    """A boto3 client against moto with the test keys."""
    return boto3.client(  # type: ignore[call-overload]
        service, region_name=region, endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def seed(endpoint: str) -> AwsEstateIds:
    """Create the estate (call once per moto server)."""
    ec2 = client(endpoint, "ec2")
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    found = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    subnets = sorted(found, key=lambda s: s["CidrBlock"])
    ssh, web = _groups(ec2, vpc)
    instances = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType="t3.micro", SubnetId=subnets[0]["SubnetId"],
        SecurityGroupIds=[web],
    )["Instances"]
    running, stopped = instances[0]["InstanceId"], instances[1]["InstanceId"]
    eip = ec2.allocate_address(Domain="vpc")
    ec2.associate_address(AllocationId=eip["AllocationId"], InstanceId=running)
    nat_eip = ec2.allocate_address(Domain="vpc")
    nat = ec2.create_nat_gateway(SubnetId=subnets[0]["SubnetId"], AllocationId=nat_eip["AllocationId"])["NatGateway"]
    _databases(endpoint, ssh)
    _cache(endpoint)
    alb = _balancer(endpoint, [s["SubnetId"] for s in subnets[:2]], vpc, web, [running, stopped])
    ec2.stop_instances(InstanceIds=[stopped])  # after registering: a stopped instance cannot be registered
    _dns(endpoint, alb)
    buckets = _buckets(endpoint)
    return AwsEstateIds(
        vpc=vpc, ssh_group=ssh, web_group=web, running=running, stopped=stopped, eip=eip["PublicIp"],
        eip_allocation=eip["AllocationId"], nat=nat["NatGatewayId"], nat_ip=nat_eip["PublicIp"],
        alb_arn=alb["LoadBalancerArn"], alb_dns=alb["DNSName"], **buckets,
    )


def _groups(ec2: Any, vpc: str) -> tuple[str, str]:
    ssh = ec2.create_security_group(GroupName="bastion-ssh", Description="ssh from anywhere", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(GroupId=ssh, IpPermissions=[{
        "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
        "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "anyone"}], "Ipv6Ranges": [{"CidrIpv6": "::/0"}],
    }])
    web = ec2.create_security_group(GroupName="web", Description="web tier", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(GroupId=web, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
        {"IpProtocol": "tcp", "FromPort": 8080, "ToPort": 8080, "UserIdGroupPairs": [{"GroupId": ssh}]},
        {"IpProtocol": "udp", "FromPort": 5000, "ToPort": 5100, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]},
    ])
    return ssh, web


def _databases(endpoint: str, group: str) -> None:
    rds = client(endpoint, "rds")
    for name, engine in (("prod-db-03", "mysql"), ("orders-pg", "postgres")):
        rds.create_db_instance(
            DBInstanceIdentifier=name, Engine=engine, DBInstanceClass="db.t3.micro", AllocatedStorage=20,
            MasterUsername="admin", MasterUserPassword="password123", VpcSecurityGroupIds=[group],
            Tags=[{"Key": "owner", "Value": "dba"}],
        )
    rds.stop_db_instance(DBInstanceIdentifier="prod-db-03")


def _cache(endpoint: str) -> None:
    client(endpoint, "elasticache").create_replication_group(
        ReplicationGroupId="orders-redis", ReplicationGroupDescription="orders cache", Engine="redis",
        CacheNodeType="cache.t3.micro", NumCacheClusters=2,
    )


def _balancer(endpoint: str, subnets: list[str], vpc: str, group: str, targets: list[str]) -> dict[str, Any]:
    elb = client(endpoint, "elbv2")
    alb = elb.create_load_balancer(
        Name="api-alb", Subnets=subnets, SecurityGroups=[group], Scheme="internet-facing", Type="application"
    )["LoadBalancers"][0]
    tg = elb.create_target_group(
        Name="api-tg", Protocol="HTTP", Port=8080, VpcId=vpc, TargetType="instance"
    )["TargetGroups"][0]
    elb.register_targets(TargetGroupArn=tg["TargetGroupArn"], Targets=[{"Id": t, "Port": 8080} for t in targets])
    certificate = client(endpoint, "acm").request_certificate(DomainName="api.example.com")["CertificateArn"]
    elb.create_listener(
        LoadBalancerArn=alb["LoadBalancerArn"], Protocol="HTTPS", Port=443,
        Certificates=[{"CertificateArn": certificate}],
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg["TargetGroupArn"]}],
    )
    elb.create_listener(
        LoadBalancerArn=alb["LoadBalancerArn"], Protocol="HTTP", Port=80,
        DefaultActions=[
            {"Type": "redirect", "RedirectConfig": {"Protocol": "HTTPS", "Port": "443", "StatusCode": "HTTP_301"}}
        ],
    )
    return dict(alb)


def _dns(endpoint: str, alb: dict[str, Any]) -> None:
    route53 = client(endpoint, "route53", "us-east-1")
    zone = route53.create_hosted_zone(Name="example.com", CallerReference="bg-estate")["HostedZone"]
    changes = [
        {"Name": "api.example.com", "Type": "A", "AliasTarget": {
            "HostedZoneId": alb["CanonicalHostedZoneId"], "DNSName": alb["DNSName"], "EvaluateTargetHealth": False}},
        {"Name": "www.example.com", "Type": "CNAME", "TTL": 300, "ResourceRecords": [{"Value": alb["DNSName"]}]},
        {"Name": "mail.example.com", "Type": "A", "TTL": 60,
         "ResourceRecords": [{"Value": "198.51.100.1"}, {"Value": "198.51.100.2"}]},
    ]
    route53.change_resource_record_sets(
        HostedZoneId=zone["Id"],
        ChangeBatch={"Changes": [{"Action": "CREATE", "ResourceRecordSet": c} for c in changes]},
    )


def _buckets(endpoint: str) -> dict[str, str]:
    s3 = client(endpoint, "s3")
    names = {
        "public_bucket": "bg-estate-assets", "acl_bucket": "bg-estate-downloads", "private_bucket": "bg-estate-logs",
    }
    here = {"LocationConstraint": REGION}
    s3.create_bucket(Bucket=names["public_bucket"], CreateBucketConfiguration=here)
    s3.put_bucket_policy(Bucket=names["public_bucket"], Policy=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                       "Resource": f"arn:aws:s3:::{names['public_bucket']}/*"}],
    }))
    s3.create_bucket(Bucket=names["acl_bucket"], CreateBucketConfiguration=here, ACL="public-read")
    client(endpoint, "s3", BUCKET_REGION).create_bucket(
        Bucket=names["private_bucket"], CreateBucketConfiguration={"LocationConstraint": BUCKET_REGION}
    )
    return names
