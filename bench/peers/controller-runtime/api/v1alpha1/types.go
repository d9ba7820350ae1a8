package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchObjectSpec is what the benchmark writes: a round number and a payload.
type BenchObjectSpec struct {
	Round   int64  `json:"round,omitempty"`
	Payload string `json:"payload,omitempty"`
}

// +kubebuilder:object:root=true

// BenchObject is the benchmark's custom resource.
type BenchObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BenchObjectSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// BenchObjectList is a list of BenchObjects.
type BenchObjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BenchObject `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BenchObject{}, &BenchObjectList{})
}
