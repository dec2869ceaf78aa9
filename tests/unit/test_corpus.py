"""Every YAML file of the heat-templates corpus either validates or is refused with a
specific reason naming file and line. Environment files are checked as environments
(their registry targets too), other YAML (cloud-config, docker-compose, DIB element data)
is refused as not being a template.

Expected outcome per file: (kind, first problem or None, number of problems); kind is
"ok" (validates), "refused" (a template that is refused) or "environment".
"""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import CORPUS
from undercloud.orchestration.template import Bundle, TemplateError, load, load_environment
from undercloud.orchestration.template.environment import SECTIONS

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")

# Found by running the validator over the corpus, then read one by one: every refusal is
# an unsupported resource type (not in the brief's list), a file the corpus does not ship
# (it holds YAML only, so scripts named by get_file are absent), or a YAML file that is
# not a template at all.
EXPECTED = {
    "hot/F18/NovaInstanceWithCinderVolume_Native.yaml": ('refused', 'hot/F18/NovaInstanceWithCinderVolume_Native.yaml:49: resources.cinder_volume.type: OS::Cinder::Volume is not a supported resource type', 2),
    "hot/F18/WordPress_Native.yaml": ('ok', None, 0),
    "hot/F18/WordPress_NoKey.yaml": ('refused', 'hot/F18/WordPress_NoKey.yaml:71: resources.securitygroup.type: AWS::EC2::SecurityGroup is not a supported resource type', 2),
    "hot/F20/WordPress_2_Instances.yaml": ('ok', None, 0),
    "hot/F20/WordPress_Native.yaml": ('ok', None, 0),
    "hot/asg_of_servers.yaml": ('refused', 'hot/asg_of_servers.yaml:48: resources.asg.type: OS::Heat::AutoScalingGroup is not a supported resource type', 3),
    "hot/asg_of_stacks.yaml": ('refused', 'hot/asg_of_stacks.yaml:48: resources.asg.type: OS::Heat::AutoScalingGroup is not a supported resource type', 3),
    "hot/autohealing/autohealing_group.yaml": ('refused', 'hot/autohealing/autohealing_group.yaml:40: resources.servers.type: OS::Heat::AutoScalingGroup is not a supported resource type', 1),
    "hot/autohealing/autohealing_server.yaml": ('refused', 'hot/autohealing/autohealing_server.yaml:69: resources.alarm_queue.type: OS::Zaqar::Queue is not a supported resource type', 6),
    "hot/autoscaling.yaml": ('refused', 'hot/autoscaling.yaml:67: resources.asg.type: OS::Heat::AutoScalingGroup is not a supported resource type', 10),
    "hot/barbican/container_generic.yaml": ('refused', 'hot/barbican/container_generic.yaml:17: resources.container.type: OS::Barbican::GenericContainer is not a supported resource type', 2),
    "hot/barbican/order.yaml": ('refused', 'hot/barbican/order.yaml:48: resources.order.type: OS::Barbican::Order is not a supported resource type', 1),
    "hot/barbican/secret.yaml": ('refused', 'hot/barbican/secret.yaml:55: resources.secret.type: OS::Barbican::Secret is not a supported resource type', 1),
    "hot/blazar/blazar_host.yaml": ('refused', 'hot/blazar/blazar_host.yaml:13: resources.sample_host.type: OS::Blazar::Host is not a supported resource type', 1),
    "hot/blazar/blazar_lease.yaml": ('refused', 'hot/blazar/blazar_lease.yaml:13: resources.sample_lease.type: OS::Blazar::Lease is not a supported resource type', 1),
    "hot/chef-server.yaml": ('ok', None, 0),
    "hot/condition.yaml": ('ok', None, 0),
    "hot/designate/desginate_domain.yaml": ('refused', 'hot/designate/desginate_domain.yaml:28: resources.sample_domain.type: OS::Designate::Domain is not a supported resource type', 1),
    "hot/designate/desginate_record.yaml": ('refused', 'hot/designate/desginate_record.yaml:54: resources.sample_domain.type: OS::Designate::Domain is not a supported resource type', 2),
    "hot/external_resource.yaml": ('ok', None, 0),
    "hot/hello_world.yaml": ('ok', None, 0),
    "hot/instance_group.yaml": ('refused', 'hot/instance_group.yaml:25: resources.server_group.type: OS::Heat::InstanceGroup is not a supported resource type', 2),
    "hot/keystone/keystone.yaml": ('refused', 'hot/keystone/keystone.yaml:7: resources.test_role_a.type: OS::Keystone::Role is not a supported resource type', 4),
    "hot/keystone/keystone_domain.yaml": ('refused', 'hot/keystone/keystone_domain.yaml:20: resources.domain.type: OS::Keystone::Domain is not a supported resource type', 1),
    "hot/keystone/keystone_group.yaml": ('refused', 'hot/keystone/keystone_group.yaml:28: resources.admin_group.type: OS::Keystone::Group is not a supported resource type', 1),
    "hot/keystone/keystone_project.yaml": ('refused', 'hot/keystone/keystone_project.yaml:21: resources.admin_project.type: OS::Keystone::Project is not a supported resource type', 1),
    "hot/keystone/keystone_region.yaml": ('refused', 'hot/keystone/keystone_region.yaml:23: resources.parent_region.type: OS::Keystone::Region is not a supported resource type', 2),
    "hot/keystone/keystone_role.yaml": ('refused', 'hot/keystone/keystone_role.yaml:12: resources.sample_role.type: OS::Keystone::Role is not a supported resource type', 1),
    "hot/keystone/keystone_service.yaml": ('refused', 'hot/keystone/keystone_service.yaml:18: resources.sample_service.type: OS::Keystone::Service is not a supported resource type', 1),
    "hot/keystone/keystone_service_endpoint.yaml": ('refused', 'hot/keystone/keystone_service_endpoint.yaml:30: resources.sample_service.type: OS::Keystone::Service is not a supported resource type', 4),
    "hot/keystone/keystone_updated.yaml": ('refused', 'hot/keystone/keystone_updated.yaml:7: resources.test_role_a.type: OS::Keystone::Role is not a supported resource type', 7),
    "hot/keystone/keystone_user.yaml": ('refused', 'hot/keystone/keystone_user.yaml:42: resources.admin_user.type: OS::Keystone::User is not a supported resource type', 1),
    "hot/lb_server.yaml": ('refused', 'hot/lb_server.yaml:40: resources.member.type: OS::Octavia::PoolMember is not a supported resource type', 1),
    "hot/magnum/create_coe_cluster.yaml": ('refused', 'hot/magnum/create_coe_cluster.yaml:77: resources.coe_cluster.type: OS::Magnum::Cluster is not a supported resource type', 2),
    "hot/mistral/nova_networking_server_with_ip_env.yaml": ('environment', None, 0),
    "hot/mistral/templates/autoscaling_using_mistral.yaml": ('refused', 'hot/mistral/templates/autoscaling_using_mistral.yaml:49: resources.my_asg.type: OS::Heat::AutoScalingGroup is not a supported resource type', 9),
    "hot/mistral/templates/server_with_ip.yaml": ('refused', 'hot/mistral/templates/server_with_ip.yaml:24: resources.floating_ip.type: OS::Nova::FloatingIP is not a supported resource type', 3),
    "hot/mistral/templates/stack_restarter.yaml": ('refused', 'hot/mistral/templates/stack_restarter.yaml:29: resources.workflow.type: OS::Mistral::Workflow is not a supported resource type', 1),
    "hot/mistral_external.yaml": ('refused', 'hot/mistral_external.yaml:6: resources.workflow.type: OS::Mistral::Workflow is not a supported resource type', 2),
    "hot/monasca/autoscaling.yaml": ('refused', 'hot/monasca/autoscaling.yaml:19: resources.group.type: OS::Heat::AutoScalingGroup is not a supported resource type', 7),
    "hot/multi_region_hello_world.yaml": ('refused', 'hot/multi_region_hello_world.yaml:49: resources.stack_one.type: OS::Heat::Stack is not a supported resource type', 2),
    "hot/native_waitcondition.yaml": ('ok', None, 0),
    "hot/neutron/instance_trunk_port.yaml": ('refused', 'hot/neutron/instance_trunk_port.yaml:73: resources.trunk0.type: OS::Neutron::Trunk is not a supported resource type', 1),
    "hot/nova/host_aggregate.yaml": ('refused', 'hot/nova/host_aggregate.yaml:21: resources.sample_host_aggregate.type: OS::Nova::HostAggregate is not a supported resource type', 1),
    "hot/octavia/servers_with_octavia.yaml": ('refused', 'hot/octavia/servers_with_octavia.yaml:68: resources.monitor.type: OS::Octavia::HealthMonitor is not a supported resource type', 6),
    "hot/resource_group/random.yaml": ('ok', None, 0),
    "hot/resource_group/resource_group.yaml": ('ok', None, 0),
    "hot/resource_group/resource_group_index_lookup.yaml": ('ok', None, 0),
    "hot/resource_group/server_with_volumes.yaml": ('refused', 'hot/resource_group/volume_with_attachment.yaml:17: resources.volume.type: OS::Cinder::Volume is not a supported resource type', 2),
    "hot/resource_group/volume_with_attachment.yaml": ('refused', 'hot/resource_group/volume_with_attachment.yaml:17: resources.volume.type: OS::Cinder::Volume is not a supported resource type', 2),
    "hot/server_console.yaml": ('ok', None, 0),
    "hot/server_with_encrpyted_volume.yaml": ('refused', 'hot/server_with_encrpyted_volume.yaml:50: resources.cinder_volume_type.type: OS::Cinder::VolumeType is not a supported resource type', 4),
    "hot/servers_in_existing_neutron_net.yaml": ('refused', 'hot/servers_in_existing_neutron_net.yaml:49: resources.server1_floating_ip.type: OS::Neutron::FloatingIP is not a supported resource type', 3),
    "hot/servers_in_existing_neutron_network_no_floating_ips.yaml": ('refused', 'hot/servers_in_existing_neutron_network_no_floating_ips.yaml:60: resources.server_security_group.type: OS::Neutron::SecurityGroup is not a supported resource type', 1),
    "hot/servers_in_new_neutron_net.yaml": ('refused', 'hot/servers_in_new_neutron_net.yaml:56: resources.router.type: OS::Neutron::Router is not a supported resource type', 4),
    "hot/software-config/boot-config/centos7_rdo_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_config_agent_centos7_rdo.yaml:9: resources.install_config_agent_rdo.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_config_agent_rdo.sh: file not found', 8),
    "hot/software-config/boot-config/container_agent_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_container_agent.yaml:13: resources.write_image_pull_script.properties.config.get_file: hot/software-config/boot-config/templates/fragments/get_container_agent_image.frag: file not found', 2),
    "hot/software-config/boot-config/fedora_pip_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_config_agent_fedora_pip.yaml:9: resources.install_python_build_env.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_python_build_env_yum.sh: file not found', 9),
    "hot/software-config/boot-config/fedora_yum_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_config_agent_fedora_yum.yaml:9: resources.install_config_agent_yum.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_config_agent_yum.sh: file not found', 8),
    "hot/software-config/boot-config/none_env.yaml": ('environment', None, 0),
    "hot/software-config/boot-config/templates/install_config_agent_centos7_rdo.yaml": ('refused', 'hot/software-config/boot-config/templates/install_config_agent_centos7_rdo.yaml:9: resources.install_config_agent_rdo.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_config_agent_rdo.sh: file not found', 8),
    "hot/software-config/boot-config/templates/install_config_agent_fedora_pip.yaml": ('refused', 'hot/software-config/boot-config/templates/install_config_agent_fedora_pip.yaml:9: resources.install_python_build_env.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_python_build_env_yum.sh: file not found', 9),
    "hot/software-config/boot-config/templates/install_config_agent_fedora_yum.yaml": ('refused', 'hot/software-config/boot-config/templates/install_config_agent_fedora_yum.yaml:9: resources.install_config_agent_yum.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_config_agent_yum.sh: file not found', 8),
    "hot/software-config/boot-config/templates/install_config_agent_test_image.yaml": ('refused', 'hot/software-config/boot-config/templates/install_config_agent_test_image.yaml:35: resources.configure_config_agent.properties.config.str_replace.params.$heat_config_script.get_file: {corpus}/heat-agents/heat-config/os-refresh-config/configure.d/55-heat-config: file not found', 9),
    "hot/software-config/boot-config/templates/install_config_agent_ubuntu_pip.yaml": ('refused', 'hot/software-config/boot-config/templates/install_config_agent_ubuntu_pip.yaml:9: resources.install_python_build_env.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_python_build_env_apt.sh: file not found', 9),
    "hot/software-config/boot-config/templates/install_container_agent.yaml": ('refused', 'hot/software-config/boot-config/templates/install_container_agent.yaml:13: resources.write_image_pull_script.properties.config.get_file: hot/software-config/boot-config/templates/fragments/get_container_agent_image.frag: file not found', 2),
    "hot/software-config/boot-config/test_image_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_config_agent_test_image.yaml:35: resources.configure_config_agent.properties.config.str_replace.params.$heat_config_script.get_file: {corpus}/heat-agents/heat-config/os-refresh-config/configure.d/55-heat-config: file not found', 9),
    "hot/software-config/boot-config/ubuntu_pip_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_config_agent_ubuntu_pip.yaml:9: resources.install_python_build_env.properties.config.get_file: hot/software-config/boot-config/templates/fragments/install_python_build_env_apt.sh: file not found', 9),
    "hot/software-config/example-templates/cirros-example/cirros-hello-world.yaml": ('ok', None, 0),
    "hot/software-config/example-templates/config-scripts/example-ca-certs-config.yml": ('refused', 'hot/software-config/example-templates/config-scripts/example-ca-certs-config.yml:10: Template format version not found: heat_template_version is missing', 1),
    "hot/software-config/example-templates/config-scripts/example-docker-compose.yml": ('refused', 'hot/software-config/example-templates/config-scripts/example-docker-compose.yml:1: Template format version not found: heat_template_version is missing', 1),
    "hot/software-config/example-templates/example-ansible-template.yaml": ('refused', 'hot/software-config/example-templates/example-ansible-template.yaml:35: resources.config.properties.config.get_file: hot/software-config/example-templates/config-scripts/example-ansible-template.ansible: file not found', 1),
    "hot/software-config/example-templates/example-cfn-init-template.yaml": ('refused', 'hot/software-config/example-templates/example-cfn-init-template.yaml:13: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 1),
    "hot/software-config/example-templates/example-chef-template.yaml": ('refused', 'hot/software-config/example-templates/example-chef-template.yaml:19: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 1),
    "hot/software-config/example-templates/example-cloud-init-configure-ca-cert.yaml": ('refused', 'hot/software-config/example-templates/example-cloud-init-configure-ca-cert.yaml:33: resources.ca_1_init.properties.cloud_config.ca-certs.trusted[0].get_file: hot/software-config/example-templates/certificates/ca_1.crt: file not found', 2),
    "hot/software-config/example-templates/example-cloud-init.yaml": ('refused', 'hot/software-config/example-templates/example-cloud-init.yaml:16: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 1),
    "hot/software-config/example-templates/example-config-pristine-image.yaml": ('refused', 'hot/software-config/example-templates/example-config-pristine-image.yaml:26: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 4),
    "hot/software-config/example-templates/example-config-pristine-image_env.yaml": ('environment', None, 0),
    "hot/software-config/example-templates/example-deploy-sequence.yaml": ('ok', None, 0),
    "hot/software-config/example-templates/example-docker-compose-template.yaml": ('refused', 'hot/software-config/example-templates/example-docker-compose-template.yaml:30: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 3),
    "hot/software-config/example-templates/example-kubelet-template.yaml": ('refused', 'hot/software-config/example-templates/example-kubelet-template.yaml:21: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 3),
    "hot/software-config/example-templates/example-os-apply-config-plus-cloud-config.yaml": ('ok', None, 0),
    "hot/software-config/example-templates/example-os-apply-config.yaml": ('ok', None, 0),
    "hot/software-config/example-templates/example-pristine-atomic-docker-compose.yaml": ('refused', 'hot/software-config/example-templates/example-pristine-atomic-docker-compose.yaml:27: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 4),
    "hot/software-config/example-templates/example-pristine-atomic-docker-compose_env.yaml": ('environment', None, 0),
    "hot/software-config/example-templates/example-pristine-atomic-tool.yaml": ('refused', 'hot/software-config/example-templates/example-pristine-atomic-tool.yaml:43: resources.boot_config.type: Heat::InstallConfigAgent is not a supported resource type', 1),
    "hot/software-config/example-templates/example-pristine-atomic-tool_env.yaml": ('environment', 'hot/software-config/boot-config/templates/install_container_agent.yaml:13: resources.write_image_pull_script.properties.config.get_file: hot/software-config/boot-config/templates/fragments/get_container_agent_image.frag: file not found', 2),
    "hot/software-config/example-templates/example-puppet-template.yaml": ('refused', 'hot/software-config/example-templates/example-puppet-template.yaml:33: resources.config.properties.config.get_file: hot/software-config/example-templates/config-scripts/example-puppet-manifest.pp: file not found', 1),
    "hot/software-config/example-templates/example-salt-template.yaml": ('refused', 'hot/software-config/example-templates/example-salt-template.yaml:34: resources.config.properties.config.get_file: hot/software-config/example-templates/config-scripts/example-salt-state.sls: file not found', 1),
    "hot/software-config/example-templates/example-script-template.yaml": ('refused', 'hot/software-config/example-templates/example-script-template.yaml:33: resources.config.properties.config.get_file: hot/software-config/example-templates/config-scripts/example-script.sh: file not found', 1),
    "hot/software-config/example-templates/example-software-deploymentgroup-template.yaml": ('refused', 'hot/software-config/example-templates/example-software-deploymentgroup-template.yaml:46: resources.config.properties.config.get_file: hot/software-config/example-templates/config-scripts/example-ansible-template.ansible: file not found', 1),
    "hot/software-config/example-templates/example-ssh-copy-id.yaml": ('refused', 'hot/software-config/example-templates/example-ssh-copy-id.yaml:95: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 1),
    "hot/software-config/example-templates/example-structured-template.yaml": ('refused', 'hot/software-config/example-templates/example-structured-template.yaml:20: resources.the_sg.type: OS::Neutron::SecurityGroup is not a supported resource type', 1),
    "hot/software-config/example-templates/example-sw-component-template.yaml": ('refused', 'hot/software-config/example-templates/example-sw-component-template.yaml:29: resources.sw_component.type: OS::Heat::SoftwareComponent is not a supported resource type', 1),
    "hot/software-config/example-templates/wordpress/WordPress_software-config_1-instance.yaml": ('refused', 'hot/software-config/example-templates/wordpress/WordPress_software-config_1-instance.yaml:72: resources.wordpress_config.properties.config.get_file: hot/software-config/example-templates/wordpress/wp_install.sh: file not found', 2),
    "hot/software-config/example-templates/wordpress/WordPress_software-config_2-instances.yaml": ('refused', 'hot/software-config/example-templates/wordpress/WordPress_software-config_2-instances.yaml:72: resources.wordpress_config.properties.config.get_file: hot/software-config/example-templates/wordpress/wp_install.sh: file not found', 2),
    "hot/software-config/test-image/elements/centos7-heat-test/package-installs.yaml": ('refused', 'hot/software-config/test-image/elements/centos7-heat-test/package-installs.yaml:2: Template format version not found: heat_template_version is missing', 1),
    "hot/software-config/test-image/elements/heat-agent-pkg-requires/package-installs.yaml": ('refused', 'hot/software-config/test-image/elements/heat-agent-pkg-requires/package-installs.yaml:1: Template format version not found: heat_template_version is missing', 1),
    "hot/software-config/test-image/elements/heat-config-hook-requires/package-installs.yaml": ('refused', 'hot/software-config/test-image/elements/heat-config-hook-requires/package-installs.yaml:1: Template format version not found: heat_template_version is missing', 1),
    "hot/software-config/test-image/elements/python-dev/package-installs.yaml": ('refused', 'hot/software-config/test-image/elements/python-dev/package-installs.yaml:1: Template format version not found: heat_template_version is missing', 1),
    "hot/swift.yaml": ('refused', 'hot/swift.yaml:7: resources.SwiftContainerWebsite.type: OS::Swift::Container is not a supported resource type', 2),
    "hot/vm_with_cinder.yaml": ('refused', 'hot/vm_with_cinder.yaml:53: resources.my_vol.type: OS::Cinder::Volume is not a supported resource type', 2),
    "hot/zun/webapp.yaml": ('refused', 'hot/zun/webapp.yaml:13: resources.secgroup.type: OS::Neutron::SecurityGroup is not a supported resource type', 5),
}


def files() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_the_table_covers_the_whole_corpus():
    assert files() == sorted(EXPECTED)


def outcome(path: str) -> tuple:
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
    except yaml.YAMLError:
        doc = None
    is_env = isinstance(doc, dict) and "heat_template_version" not in doc and set(doc) <= set(SECTIONS)
    try:
        if is_env:
            load_environment(Bundle.from_paths(None, [path]))
            return ("environment", None, 0)
        load(Bundle.from_paths(path), partial=True)
        return ("ok", None, 0)
    except TemplateError as exc:
        return ("environment" if is_env else "refused", exc.problems[0], len(exc.problems))


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_corpus_file(path, monkeypatch):
    monkeypatch.chdir(CORPUS)  # problems name files relative to the working directory
    kind, first, count = EXPECTED[path]
    if first is not None:
        first = first.replace("{corpus}", str(CORPUS.parent))
    assert outcome(path) == (kind, first, count)
