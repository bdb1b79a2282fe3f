package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
)

// Compose's labels, which the package writes beside its own so that
// compose's CLI ("docker compose -p P ps", "logs", "down") sees the
// containers, networks and volumes of a project converge runs, and through
// which the package finds a project "docker compose up" started.
const (
	// LabelComposeProject names the Compose project of a container,
	// network or volume: the Project's Name.
	LabelComposeProject = "com.docker.compose.project"
	// LabelComposeService names the service of a container.
	LabelComposeService = "com.docker.compose.service"
	// LabelComposeContainerNumber is the replica number of a container:
	// N for a container named "<project>-<service>-N", 1 otherwise.
	LabelComposeContainerNumber = "com.docker.compose.container-number"
	// LabelComposeOneoff is "False" on a service's container ("True" marks
	// the one-off containers of "docker compose run", which the package
	// never adopts nor removes).
	LabelComposeOneoff = "com.docker.compose.oneoff"
	// LabelComposeVersion is the compose release whose labels and
	// configuration hash the package writes (ComposeVersion).
	LabelComposeVersion = "com.docker.compose.version"
	// LabelComposeConfigHash is compose's configuration hash of the
	// service (ContainerSpec.ComposeHash), written only when it is set.
	LabelComposeConfigHash = "com.docker.compose.config-hash"
	// LabelComposeDependsOn lists a container's dependencies as compose
	// writes them: "service:condition:restart", comma-separated.
	LabelComposeDependsOn = "com.docker.compose.depends_on"
	// LabelComposeImage is the ID of the image a container was created
	// from; compose recreates a container whose label differs from the ID
	// of the local image.
	LabelComposeImage = "com.docker.compose.image"
	// LabelComposeWorkingDir is the directory of the project's Compose
	// file (Project.ComposeDir), written when it is known.
	LabelComposeWorkingDir = "com.docker.compose.project.working_dir"
	// LabelComposeConfigFiles lists the project's Compose files
	// (Project.ComposeFiles), comma-separated, written when they are known.
	LabelComposeConfigFiles = "com.docker.compose.project.config_files"
	// LabelComposeNetwork is a network's key in the Compose file
	// ("default"): its name without the "<project>_" prefix, or its name.
	LabelComposeNetwork = "com.docker.compose.network"
	// LabelComposeVolume is a volume's key in the Compose file, as
	// LabelComposeNetwork is a network's.
	LabelComposeVolume = "com.docker.compose.volume"
)

// ComposeVersion is the compose v2 release whose labels and configuration
// hash the package reproduces, and the value of LabelComposeVersion.
const ComposeVersion = "2.40.3"

// composeConfigHash is compose's configuration hash of a service, as
// compose ComposeVersion computes it: the SHA-256, in hex, of the JSON of
// its compose-go ServiceConfig without the fields compose leaves out of it
// (build, pull_policy, scale, deploy.replicas, depends_on and profiles).
// That compose is built on an older compose-go than the package, whose
// JSON of a service differs in two ways the hash sees, both undone here:
// the order of the service's members (composeServiceKeys) and a bind
// mount's create_host_path, written when true (it is omitted when true
// since). A service using a member that compose does not know, an
// env_file or a hook is given no hash (errNoComposeHash): its JSON is not
// known to match compose's.
func composeConfigHash(s types.ServiceConfig) (string, error) {
	s.Build = nil
	s.PullPolicy = ""
	s.Scale = nil
	if s.Deploy != nil {
		d := *s.Deploy
		d.Replicas = nil
		s.Deploy = &d
	}
	s.DependsOn = nil
	s.Profiles = nil
	if len(s.EnvFiles) > 0 || len(s.PostStart) > 0 || len(s.PreStop) > 0 || len(s.PreStart) > 0 {
		return "", errNoComposeHash
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return "", err
	}
	if raw, ok := members["volumes"]; ok {
		if members["volumes"], err = legacyBinds(s.Volumes, raw); err != nil {
			return "", err
		}
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for _, k := range composeServiceKeys {
		raw, ok := members[k]
		if !ok {
			continue
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		out.WriteString(strconv.Quote(k) + ":")
		out.Write(raw)
		delete(members, k)
	}
	out.WriteByte('}')
	if len(members) > 0 {
		return "", errNoComposeHash
	}
	sum := sha256.Sum256(out.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// errNoComposeHash is a service whose compose hash is not written.
var errNoComposeHash = errors.New("docker: no compose hash")

// composeServiceKeys are the members of a service's JSON in the order
// compose ComposeVersion writes them.
var composeServiceKeys = strings.Fields(`profiles annotations attach build develop blkio_config cap_add cap_drop
	cgroup_parent cgroup cpu_count cpu_percent cpu_period cpu_quota cpu_rt_period cpu_rt_runtime cpus cpuset
	cpu_shares command configs container_name credential_spec depends_on deploy device_cgroup_rules devices dns
	dns_opt dns_search dockerfile domainname entrypoint provider environment env_file expose extends
	external_links extra_hosts group_add gpus hostname healthcheck image init ipc isolation labels label_file
	links logging log_driver log_opt mem_limit mem_reservation memswap_limit mem_swappiness mac_address models
	net network_mode networks oom_kill_disable oom_score_adj pid pids_limit platform ports privileged
	pull_policy read_only restart runtime scale secrets security_opt shm_size stdin_open stop_grace_period
	stop_signal storage_opt sysctls tmpfs tty ulimits use_api_socket user userns_mode uts volume_driver volumes
	volumes_from working_dir post_start pre_stop`)

// legacyBinds rewrites the JSON raw of a service's volumes with each bind
// mount's options as compose ComposeVersion writes them: create_host_path
// present when true, absent when false.
func legacyBinds(vols []types.ServiceVolumeConfig, raw json.RawMessage) (json.RawMessage, error) {
	type legacyBind struct {
		SELinux        string `json:"selinux,omitempty"`
		Propagation    string `json:"propagation,omitempty"`
		CreateHostPath bool   `json:"create_host_path,omitempty"`
		Recursive      string `json:"recursive,omitempty"`
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) != len(vols) {
		return nil, errNoComposeHash
	}
	for i, v := range vols {
		if v.Bind == nil {
			continue
		}
		now, err := json.Marshal(v.Bind)
		if err != nil {
			return nil, err
		}
		then, err := json.Marshal(legacyBind{SELinux: v.Bind.SELinux, Propagation: v.Bind.Propagation,
			CreateHostPath: bool(v.Bind.CreateHostPath), Recursive: v.Bind.Recursive})
		if err != nil {
			return nil, err
		}
		from := append([]byte(`"bind":`), now...)
		if bytes.Count(items[i], from) != 1 {
			return nil, errNoComposeHash
		}
		items[i] = bytes.Replace(items[i], from, append([]byte(`"bind":`), then...), 1)
	}
	return json.Marshal(items)
}

// composeKey is the key in the Compose file of a network or volume of
// project named name: the name without the "<project>_" prefix the loader
// gives it, or the name.
func composeKey(project, name string) string {
	if k, ok := strings.CutPrefix(name, project+"_"); ok && k != "" {
		return k
	}
	return name
}

// composeObjectLabels are compose's labels of a network (key
// LabelComposeNetwork) or volume (LabelComposeVolume) named name.
func composeObjectLabels(project, keyLabel, name string) map[string]string {
	if project == "" { // a standalone item of no project
		return map[string]string{}
	}
	return map[string]string{LabelComposeProject: project, keyLabel: composeKey(project, name), LabelComposeVersion: ComposeVersion}
}

// containerNumber is the replica number of the container name of a
// service: N when name is "<project>-<service>-N", else 1.
func containerNumber(project, service, name string) int {
	if n, ok := strings.CutPrefix(name, project+"-"+service+"-"); ok {
		if i, err := strconv.Atoi(n); err == nil && i > 0 {
			return i
		}
	}
	return 1
}

// composeLabels adds compose's labels of the container name to labels;
// imageID is the ID of the image it is created from ("" when unknown).
func (c *Container) composeLabels(labels map[string]string, name, imageID string) {
	s := &c.spec
	if name == TempName(c.name) {
		name = c.name
	}
	labels[LabelComposeProject] = c.project
	labels[LabelComposeService] = s.Service
	labels[LabelComposeContainerNumber] = strconv.Itoa(containerNumber(c.project, s.Service, name))
	labels[LabelComposeOneoff] = "False"
	labels[LabelComposeVersion] = ComposeVersion
	if s.ComposeHash != "" {
		labels[LabelComposeConfigHash] = s.ComposeHash
	}
	if imageID != "" {
		labels[LabelComposeImage] = imageID
	}
	if c.composeDir != "" {
		labels[LabelComposeWorkingDir] = c.composeDir
	}
	if c.composeFiles != "" {
		labels[LabelComposeConfigFiles] = c.composeFiles
	}
	deps := make([]string, 0, len(s.DependsOn))
	for _, d := range s.DependsOn {
		deps = append(deps, d.Service+":"+d.Condition.String()+":false")
	}
	labels[LabelComposeDependsOn] = strings.Join(deps, ",")
}

// ownedLabels reports whether a container with labels belongs to project:
// converge created it for the project, or compose did (not as a one-off
// container of "docker compose run").
func ownedLabels(labels map[string]string, project string) bool {
	if labels[LabelOwner] == OwnerValue {
		return labels[LabelProject] == project
	}
	return labels[LabelComposeProject] == project && labels[LabelComposeOneoff] != "True"
}

// adoptable returns the name of the container of service, under another
// name than name, that the container named name adopts (renames) when it
// matches and replaces otherwise, so that a change of naming recreates
// nothing that matches. For the one container of a service without
// Replicas (scaled false), it is the lowest-numbered of the service's
// containers that only compose labelled (compose names them
// "<project>-<service>-N"), or else of the replicas the package ran under
// those names while the service was scaled. For replica 1 of a scaled
// service (scaled true), it is the container the package ran under the
// service's unscaled name "<project>-<service>". It returns "" when name
// is in the snapshot or when there is none.
func (s *snapshot) adoptable(project, service, name string, scaled bool) string {
	if s == nil {
		return ""
	}
	if _, ok := s.containers[name]; ok {
		return ""
	}
	var found, ours []string
	for n, c := range s.containers {
		l := c.Labels
		switch {
		case !ownedLabels(l, project) || l[LabelComposeService] != service && l[LabelService] != service:
		case scaled:
			if l[LabelOwner] == OwnerValue && n == project+"-"+service {
				ours = append(ours, n)
			}
		case l[LabelOwner] != OwnerValue:
			found = append(found, n)
		case replicaNumber(n) > 0 && n == project+"-"+service+"-"+strconv.Itoa(replicaNumber(n)):
			ours = append(ours, n)
		}
	}
	if len(found) == 0 {
		found = ours
	}
	slices.SortFunc(found, func(a, b string) int {
		na, _ := strconv.Atoi(s.containers[a].Labels[LabelComposeContainerNumber])
		nb, _ := strconv.Atoi(s.containers[b].Labels[LabelComposeContainerNumber])
		if na != nb {
			return na - nb
		}
		return strings.Compare(a, b)
	})
	if len(found) == 0 {
		return ""
	}
	return found[0]
}

// composeState fills in what compose's labels say of a container.
func composeState(st *ContainerState, labels map[string]string) {
	st.composeHash = labels[LabelComposeConfigHash]
}
